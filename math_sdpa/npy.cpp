// npy.cpp: the .npy reader and writer behind --inputs and --save-output.
//
// Captured files come from outside the harness and may be damaged, so nothing in them is
// trusted: every length and dimension is checked before it is used, and the header's Python
// dict is read by a small parser with a nesting limit. Multi-byte values are assembled byte by
// byte, so the code is the same on little- and big-endian hosts.
#include "npy.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <functional>
#include <map>
#include <utility>

#include "atomic_file.h"
#include "errors.h"

namespace sdpa {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr int kMaxNesting = 16;  // numpy never nests; the limit keeps garbage off the stack
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr const char* kAccepted =
    "accepted: '<f4' float32, '<f2' float16, '<u2' bfloat16 stored as uint16, '|b1' or '|u1' bool";

[[noreturn]] void fail(const std::string& what, const std::string& message) { throw InputError(what + ": " + message); }

// File bytes may be anything, and a message must stay one printable line.
std::string printable(const std::string& s) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += c >= 0x20 && c < 0x7f ? std::string(1, static_cast<char>(c)) : std::string{'\\', 'x', hex[c >> 4], hex[c & 15]};
  }
  return out;
}

int64_t item_size(NpyType t) { return t == NpyType::float32 ? 4 : t == NpyType::bool8 ? 1 : 2; }

std::string dims_string(const std::vector<int64_t>& shape) {
  if (shape.empty()) return "0-d";
  std::string s = std::to_string(shape[0]);
  for (size_t i = 1; i < shape.size(); ++i) s += "x" + std::to_string(shape[i]);
  return s;
}

// Shared by reader and writer, so neither sizes a buffer from a shape that overflows.
int64_t checked_count(const std::vector<int64_t>& shape, int64_t item, const std::string& what) {
  for (int64_t d : shape) {
    if (d < 0) fail(what, "negative dimension in shape " + dims_string(shape));
  }
  if (std::count(shape.begin(), shape.end(), 0)) return 0;  // (0, 2^62, 2^62) is empty, not an overflow
  int64_t count = 1;
  for (int64_t d : shape) {
    if (count > kInt64Max / d) fail(what, "shape " + dims_string(shape) + " overflows int64");
    count *= d;
  }
  if (count > kInt64Max / item) fail(what, "byte count of shape " + dims_string(shape) + " overflows int64");
  return count;
}

// A Python literal as numpy writes it in a header: a quoted string, a bare word (True, 3, None)
// or a tuple or list. Enough to read 'descr', 'fortran_order' and 'shape' and to skip other keys.
struct Literal {
  enum Kind { text, word, tuple, list } kind = word;
  std::string value;
  std::vector<Literal> items;
};

struct HeaderParser {
  const std::string& s;
  const std::string& what;
  size_t pos = 0;

  [[noreturn]] void error(const std::string& message) const {
    fail(what, "malformed header: " + message + " (at header byte " + std::to_string(pos) + ")");
  }
  bool at(char c) const { return pos < s.size() && s[pos] == c; }
  std::string found() const { return pos < s.size() ? "'" + printable(s.substr(pos, 1)) + "'" : "the end of the header"; }
  void skip_space() { while (at(' ') || at('\t') || at('\n') || at('\r')) ++pos; }
  void expect(char c) {
    if (!at(c)) error(std::string("expected '") + c + "', found " + found());
    ++pos;
    skip_space();
  }
  static bool word_char(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c && std::strchr("_.+-", c));
  }

  std::map<std::string, Literal> parse_dict() {
    std::map<std::string, Literal> entries;
    skip_space();
    for (expect('{'); !at('}');) {
      const Literal key = parse_literal(0);
      if (key.kind != Literal::text) error("a key is not a quoted string");
      expect(':');
      if (!entries.emplace(key.value, parse_literal(0)).second) error("duplicate key '" + printable(key.value) + "'");
      if (!at('}')) expect(',');
    }
    expect('}');
    if (pos != s.size()) error("unexpected text after the closing '}'");
    return entries;
  }

  // Leaves pos after the literal and any space that follows it.
  Literal parse_literal(int depth) {
    if (depth > kMaxNesting) error("nested too deeply");
    Literal lit;
    const char open = pos < s.size() ? s[pos] : '\0';
    if (open == '\'' || open == '"') {
      lit.kind = Literal::text;
      for (++pos; pos < s.size() && s[pos] != open; ++pos) {
        if (s[pos] == '\\' && pos + 1 < s.size()) ++pos;  // an escaped character is taken as is
        lit.value += s[pos];
      }
      if (pos >= s.size()) error("unterminated string");
      ++pos;
    } else if (open == '(' || open == '[') {
      lit.kind = open == '(' ? Literal::tuple : Literal::list;
      const char close = open == '(' ? ')' : ']';
      bool comma = false;
      for (++pos, skip_space(); !at(close);) {
        lit.items.push_back(parse_literal(depth + 1));
        if (!at(close)) expect(','), comma = true;
      }
      ++pos;
      if (lit.kind == Literal::tuple && lit.items.size() == 1 && !comma) lit = Literal(lit.items[0]);  // (3) is 3
    } else {
      while (pos < s.size() && word_char(s[pos])) lit.value += s[pos++];
      if (lit.value.empty()) error("unexpected " + found());
    }
    skip_space();
    return lit;
  }
};

NpyType parse_descr(const Literal& descr, const std::string& what) {
  if (descr.kind != Literal::text) fail(what, std::string("unsupported dtype (not a string); ") + kAccepted);
  const std::string& d = descr.value;
  if (d == "<f4") return NpyType::float32;
  if (d == "<f2") return NpyType::float16;
  if (d == "<u2") return NpyType::uint16;
  if (d == "|b1" || d == "|u1" || d == "<u1") return NpyType::bool8;
  const bool big_endian = d.size() > 1 && d[0] == '>';
  fail(what, std::string(big_endian ? "big-endian dtype '" : "unsupported dtype '") + printable(d) + "'; " + kAccepted);
}

int64_t parse_dim(const Literal& dim, const std::string& what) {
  std::string digits = dim.kind == Literal::word ? dim.value : "";
  if (digits.size() > 1 && digits.back() == 'L') digits.pop_back();  // Python 2 wrote longs as 3L
  const bool negative = digits.size() > 1 && digits[0] == '-';
  if (digits.empty() || digits.find_first_not_of("0123456789", negative ? 1 : 0) != std::string::npos) {
    const std::string shown = dim.kind == Literal::word ? dim.value : dim.kind == Literal::text ? "'" + dim.value + "'" : "(...)";
    fail(what, "dimension " + printable(shown) + " in 'shape' is not a non-negative integer");
  }
  if (negative) fail(what, "negative dimension " + digits + " in 'shape'");
  int64_t value = 0;
  for (char c : digits) {
    if (value > (kInt64Max - (c - '0')) / 10) fail(what, "dimension " + digits + " overflows int64");
    value = value * 10 + (c - '0');
  }
  return value;
}

// The array described by the header, with empty data; `data_offset` is where its bytes start.
NpyArray parse_layout(const std::vector<uint8_t>& bytes, const std::string& what, size_t& data_offset) {
  if (bytes.empty()) fail(what, "empty file");
  if (bytes.size() < kMagicLen || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0) {
    fail(what, "not a .npy file (bad magic; expected \\x93NUMPY)");
  }
  if (bytes.size() < 8) fail(what, "truncated: the file ends inside the .npy preamble");
  const int major = bytes[6], minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) {
    fail(what, "unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor) + " (supported: 1.0, 2.0, 3.0)");
  }
  const size_t length_bytes = major == 1 ? 2 : 4, header_start = 8 + length_bytes;
  if (bytes.size() < header_start) fail(what, "truncated: the file ends inside the .npy preamble");
  uint64_t header_len = 0;
  for (size_t i = 0; i < length_bytes; ++i) header_len |= static_cast<uint64_t>(bytes[8 + i]) << (8 * i);
  if (header_len > bytes.size() - header_start) {
    fail(what, "header length " + std::to_string(header_len) + " runs past the end of the file (" + std::to_string(bytes.size()) +
                   " bytes)");
  }
  const std::string header(reinterpret_cast<const char*>(bytes.data()) + header_start, static_cast<size_t>(header_len));
  const auto entries = HeaderParser{header, what}.parse_dict();
  auto entry = [&](const std::string& key) -> const Literal& {
    if (!entries.count(key)) fail(what, "malformed header: no '" + key + "' key");
    return entries.at(key);
  };
  const Literal &descr = entry("descr"), &fortran = entry("fortran_order"), &shape = entry("shape");
  NpyArray array{parse_descr(descr, what), {}, {}};
  if (fortran.kind == Literal::word && fortran.value == "True") {
    fail(what, "Fortran order is not supported (save a C-contiguous array: np.save(f, np.ascontiguousarray(x)))");
  }
  if (fortran.kind != Literal::word || fortran.value != "False") fail(what, "malformed header: 'fortran_order' is not a bool");
  if (shape.kind != Literal::tuple) fail(what, "malformed header: 'shape' is not a tuple");
  for (const Literal& dim : shape.items) array.shape.push_back(parse_dim(dim, what));
  const int64_t item = item_size(array.type);
  const uint64_t expected = static_cast<uint64_t>(checked_count(array.shape, item, what) * item);
  data_offset = header_start + header_len;
  const uint64_t actual = bytes.size() - data_offset;
  if (actual != expected) {
    fail(what, std::string(actual < expected ? "truncated" : "size mismatch") + ": header says " + dims_string(array.shape) + " " +
                   npy_type_name(array.type) + " (" + std::to_string(expected) + " bytes of data) but the file has " +
                   std::to_string(actual) + (actual < expected ? "" : " (extra data after the array)"));
  }
  return array;
}

}  // namespace

// Through checked_count: a plain product of (2121, 120, 21110, 211120, 0) overflows before it
// reaches the 0 (found by fuzz_npy).
int64_t NpyArray::element_count() const { return checked_count(shape, 1, ".npy array"); }

const char* npy_type_name(NpyType t) {
  return t == NpyType::float32 ? "float32" : t == NpyType::float16 ? "float16" : t == NpyType::uint16 ? "uint16(bfloat16)" : "bool";
}

NpyArray parse_npy(const std::vector<uint8_t>& bytes, const std::string& what) {
  size_t data_offset = 0;
  NpyArray array = parse_layout(bytes, what, data_offset);
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_offset), bytes.end());
  return array;
}

NpyArray read_npy(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, f)) > 0;) bytes.insert(bytes.end(), chunk, chunk + n);
  const int read_errno = std::ferror(f) ? errno : 0;  // e.g. EISDIR for a directory
  std::fclose(f);
  if (read_errno) fail(path, std::string("cannot read: ") + std::strerror(read_errno));
  // Moving the data out instead of copying it keeps one copy of a large capture in memory.
  size_t data_offset = 0;
  NpyArray array = parse_layout(bytes, path, data_offset);
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(data_offset));
  array.data = std::move(bytes);
  return array;
}

namespace {

// The .npy header of an array of `descr` elements of `shape`, padded as numpy pads it.
std::vector<uint8_t> npy_header(const std::string& descr, const std::vector<int64_t>& shape) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // numpy pads so that the data starts at a multiple of 64 bytes (for memory-mapping).
  header.append((64 - (kMagicLen + 4 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xffff) throw InputError("cannot encode .npy: shape " + dims_string(shape) + " has too many dimensions");
  const std::string prefix = std::string(kMagic, kMagicLen) + '\x01' + '\x00' + static_cast<char>(header.size() & 0xff) +
                             static_cast<char>(header.size() >> 8) + header;
  return std::vector<uint8_t>(prefix.begin(), prefix.end());
}

}  // namespace

std::vector<uint8_t> encode_npy_float32(const std::vector<int64_t>& shape, const float* data) {
  const int64_t count = checked_count(shape, 4, "cannot encode .npy");
  std::vector<uint8_t> out = npy_header("<f4", shape);
  out.reserve(out.size() + static_cast<size_t>(count) * 4);
  for (int64_t i = 0; i < count; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &data[i], 4);  // float and uint32 share byte order, so the shifts below give little-endian
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<uint8_t>(bits >> (8 * b)));
  }
  return out;
}

void write_npy_bool(const std::string& path, const std::vector<int64_t>& shape, const uint8_t* data) {
  const int64_t count = checked_count(shape, 1, "cannot encode .npy");
  std::vector<uint8_t> bytes = npy_header("|b1", shape);
  bytes.insert(bytes.end(), data, data + count);
  write_file_atomic(path, std::string(bytes.begin(), bytes.end()));
}

void write_npy_float32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  const std::vector<uint8_t> bytes = encode_npy_float32(shape, data);
  write_file_atomic(path, std::string(bytes.begin(), bytes.end()));
}

}  // namespace sdpa
