// test_npy.cpp: the .npy reader and writer, on valid files and on every kind of broken one.
//
// The harness replays Q, K, V and a mask captured from a failing PyTorch run with np.save; a
// bad capture must end in one InputError line, never a crash or a run on wrong data. numpy is
// not needed: the files are built here byte by byte, as numpy lays them out.
#include <doctest/doctest.h>

#include <dirent.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "math_sdpa/errors.h"
#include "math_sdpa/npy.h"

using sdpa::InputError;
using sdpa::NpyArray;
using sdpa::NpyType;

namespace {

struct NpyTempDir {
  std::string path;
  NpyTempDir() {
    char tmpl[] = "/tmp/sdpa_npy_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~NpyTempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    DIR* d = opendir(path.c_str());
    while (const dirent* e = d ? readdir(d) : nullptr) {
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) names.push_back(e->d_name);
    }
    if (d) closedir(d);
    return names;
  }
};

std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// A .npy file as numpy lays it out: magic, version, little-endian header length (2 bytes for
// 1.0, 4 for 2.0 and 3.0), the dict padded with spaces so the data starts at a multiple of 64.
std::vector<uint8_t> npy_file(const std::string& dict, const std::vector<uint8_t>& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::vector<uint8_t> out = bytes_of(std::string("\x93NUMPY") + static_cast<char>(major) + '\0');
  for (size_t i = 0; i < prefix - 8; ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string dict_for(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

std::vector<float> floats_of(const NpyArray& a) {
  std::vector<float> out(a.data.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    uint32_t bits = 0;
    for (int b = 0; b < 4; ++b) bits |= static_cast<uint32_t>(a.data[i * 4 + b]) << (8 * b);
    std::memcpy(&out[i], &bits, 4);
  }
  return out;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    sdpa::parse_npy(bytes, "x.npy");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// The file with its header length field (2 bytes for version 1.0, 4 for 2.0 and 3.0) set to `length`.
std::vector<uint8_t> with_header_length(std::vector<uint8_t> file, uint64_t length) {
  const size_t length_bytes = file.at(6) == 1 ? 2 : 4;
  for (size_t i = 0; i < length_bytes; ++i) file.at(8 + i) = static_cast<uint8_t>(length >> (8 * i));
  return file;
}

}  // namespace

TEST_SUITE("npy") {
  TEST_CASE("float32 round trip: 1-d, 4-d, 0-d and empty") {
    NpyTempDir dir;
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> uniform(-1e4f, 1e4f);
    const std::vector<std::vector<int64_t>> shapes = {{37}, {2, 3, 5, 7}, {}, {0, 3}};
    for (const auto& shape : shapes) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> values(static_cast<size_t>(n));
      for (float& v : values) v = uniform(rng);
      const std::string path = dir.path + "/a.npy";
      sdpa::write_npy_float32(path, shape, values.data());
      const NpyArray a = sdpa::read_npy(path);
      CHECK(a.type == NpyType::float32);
      CHECK(a.shape == shape);
      CHECK(a.element_count() == n);
      CHECK(floats_of(a) == values);
      CHECK(sdpa::parse_npy(sdpa::encode_npy_float32(shape, values.data()), "a").shape == shape);
    }
  }

  TEST_CASE("the writer lays the header out as numpy does") {
    const float six[] = {0, 1, 2, 3, 4, 5};
    const std::vector<float> zeros(24, 0.0f);
    const std::vector<uint8_t> file = sdpa::encode_npy_float32({2, 3}, six);
    const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    CHECK(file == npy_file(dict, std::vector<uint8_t>(file.end() - 24, file.end())));
    CHECK(file.size() == 128 + 24);
    CHECK(std::string(file.begin() + 10, file.begin() + 10 + static_cast<long>(dict.size())) == dict);
    CHECK(file[128] == 0);          // 0.0f
    CHECK(file[128 + 7] == 0x3f);   // 1.0f = 0x3f800000, little-endian
    const std::vector<std::vector<int64_t>> shapes = {{}, {7}, {2, 3}, {1, 2, 3, 4}, std::vector<int64_t>(20, 1), {123456789, 0}};
    for (const auto& shape : shapes) {
      const std::vector<uint8_t> f = sdpa::encode_npy_float32(shape, zeros.data());
      const size_t header_len = f[8] | (f[9] << 8);
      CHECK((10 + header_len) % 64 == 0);
      CHECK(f[10 + header_len - 1] == '\n');
      CHECK(f[6] == 1);
      CHECK(f[7] == 0);
    }
    const std::vector<uint8_t> one_d = sdpa::encode_npy_float32({7}, zeros.data());
    CHECK(std::string(one_d.begin(), one_d.end()).find("'shape': (7,), }") != std::string::npos);
    const std::vector<uint8_t> zero_d = sdpa::encode_npy_float32({}, six);
    CHECK(std::string(zero_d.begin(), zero_d.end()).find("'shape': (), }") != std::string::npos);
  }

  TEST_CASE("what numpy 1.24+ writes (spare header space for growth) reads back") {
    // np.save(f, np.arange(6, dtype=np.float32).reshape(2, 3)): 20 spare spaces, then padding.
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(20 + 38, ' ') + "\n";
    REQUIRE(header.size() == 118);
    std::vector<uint8_t> file = bytes_of(std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(118) + '\0' + header);
    for (float v = 0; v < 6; ++v) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      for (int b = 0; b < 4; ++b) file.push_back(static_cast<uint8_t>(bits >> (8 * b)));
    }
    const NpyArray a = sdpa::parse_npy(file, "arange.npy");
    CHECK(a.shape == std::vector<int64_t>{2, 3});
    CHECK(floats_of(a) == std::vector<float>{0, 1, 2, 3, 4, 5});
  }

  TEST_CASE("float16, bfloat16-as-uint16 and bool files") {
    const std::vector<uint8_t> halves = {0x00, 0x3c, 0x00, 0xc0, 0x00, 0x7c};  // 1.0, -2.0, inf
    NpyArray a = sdpa::parse_npy(npy_file(dict_for("<f2", "(3,)"), halves), "h");
    CHECK(a.type == NpyType::float16);
    CHECK(a.shape == std::vector<int64_t>{3});
    CHECK(a.data == halves);
    a = sdpa::parse_npy(npy_file(dict_for("<u2", "(1, 3)"), halves), "b");
    CHECK(a.type == NpyType::uint16);
    CHECK(a.data == halves);
    CHECK(std::string(sdpa::npy_type_name(a.type)) == "uint16(bfloat16)");
    for (const std::string descr : {"|b1", "|u1", "<u1"}) {
      a = sdpa::parse_npy(npy_file(dict_for(descr, "(2, 2)"), {1, 0, 0, 1}), "m");
      CHECK(a.type == NpyType::bool8);
      CHECK(a.shape == std::vector<int64_t>{2, 2});
      CHECK(a.data == std::vector<uint8_t>{1, 0, 0, 1});
    }
    // Key order, quoting style, spacing and unknown keys do not matter; Python 2's 3L does not either.
    a = sdpa::parse_npy(npy_file("{ \"shape\" : ( 2 ,3L ) ,'extra': [1, (2, 'x')], \"fortran_order\":False,'descr':'<f2'}",
                                 std::vector<uint8_t>(12)), "k");
    CHECK(a.shape == std::vector<int64_t>{2, 3});
    CHECK(a.type == NpyType::float16);
  }

  TEST_CASE("version 2.0 and 3.0 headers") {
    for (int major : {2, 3}) {
      const std::vector<uint8_t> file = npy_file(dict_for("<f4", "(2,)"), {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}, major);
      CHECK(((file[8] | file[9] << 8 | file[10] << 16 | file[11] << 24) + 12) % 64 == 0);
      const NpyArray a = sdpa::parse_npy(file, "v2");
      CHECK(floats_of(a) == std::vector<float>{1, 2});
    }
  }

  TEST_CASE("missing, unreadable and empty files") {
    NpyTempDir dir;
    CHECK_THROWS_WITH_AS(sdpa::read_npy(dir.path + "/missing.npy"), doctest::Contains("missing.npy: cannot open"), InputError);
    CHECK_THROWS_AS(sdpa::read_npy(dir.path), InputError);  // a directory
    write_bytes(dir.path + "/empty.npy", {});
    CHECK_THROWS_WITH_AS(sdpa::read_npy(dir.path + "/empty.npy"), doctest::Contains("empty.npy: empty file"), InputError);
    CHECK_THROWS_AS(sdpa::parse_npy({}, "e"), InputError);
    write_bytes(dir.path + "/short.npy", npy_file(dict_for("<f4", "(4,)"), std::vector<uint8_t>(15)));
    CHECK_THROWS_WITH_AS(sdpa::read_npy(dir.path + "/short.npy"), doctest::Contains("short.npy: truncated"), InputError);
  }

  TEST_CASE("bad preamble: magic, version, header length") {
    const std::vector<uint8_t> good = npy_file(dict_for("<f4", "(1,)"), {0, 0, 0, 0});
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(bytes_of("PK\x03\x04 a zip, not an npy"), "z"), doctest::Contains("magic"), InputError);
    CHECK_THROWS_AS(sdpa::parse_npy(bytes_of("\x93NUM"), "z"), InputError);
    CHECK_THROWS_AS(sdpa::parse_npy(bytes_of("\x93NUMPY"), "z"), InputError);
    CHECK_THROWS_AS(sdpa::parse_npy(bytes_of(std::string("\x93NUMPY\x01\x00\x05", 9)), "z"), InputError);
    CHECK_THROWS_AS(sdpa::parse_npy(bytes_of(std::string("\x93NUMPY\x02\x00\x05\x00\x00", 11)), "z"), InputError);
    for (const auto& [major, minor] : {std::pair{4, 0}, {1, 1}, {0, 0}, {255, 255}}) {
      std::vector<uint8_t> file = good;
      file[6] = static_cast<uint8_t>(major);
      file[7] = static_cast<uint8_t>(minor);
      CHECK_THROWS_WITH_AS(sdpa::parse_npy(file, "z"), doctest::Contains("unsupported .npy version"), InputError);
    }
    std::vector<uint8_t> file = good;
    file[9] = 0x10;  // header length 4096 + 54
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(file, "z"), doctest::Contains("past the end"), InputError);
    file = npy_file(dict_for("<f4", "(1,)"), {0, 0, 0, 0}, 2);
    file[11] = 0xff;  // 4-byte length near 4 GiB
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(file, "z"), doctest::Contains("past the end"), InputError);
  }

  TEST_CASE("malformed header dicts") {
    const std::vector<uint8_t> four = {0, 0, 0, 0};
    const std::vector<std::string> dicts = {
        "{'fortran_order': False, 'shape': (1,), }",                           // no descr
        "{'descr': '<f4', 'shape': (1,), }",                                   // no fortran_order
        "{'descr': '<f4', 'fortran_order': False, }",                          // no shape
        "{'descr: '<f4', 'fortran_order': False, 'shape': (1,), }",            // bad quoting
        "{'descr': '<f4\", 'fortran_order': False, 'shape': (1,), }",          // mismatched quotes
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), ",            // no closing brace
        "'descr': '<f4', 'fortran_order': False, 'shape': (1,)",               // no braces
        "{'descr' '<f4', 'fortran_order': False, 'shape': (1,), }",            // no colon
        "{'descr': '<f4' 'fortran_order': False, 'shape': (1,), }",            // no comma
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } junk",      // text after the dict
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}",  // duplicate key
        "{descr: '<f4', 'fortran_order': False, 'shape': (1,), }",             // unquoted key
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,, ), }",         // empty tuple item
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1 2), }",          // no comma in tuple
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)",              // ends early
        "{'descr': '<f4', 'fortran_order': False, 'shape': [1], }",            // a list, not a tuple
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1), }",            // (1) is an int
        "{'descr': '<f4', 'fortran_order': False, 'shape': 1, }",              // an int
        "{'descr': '<f4', 'fortran_order': Nope, 'shape': (1,), }",            // not a bool
        "{'descr': '<f4', 'fortran_order': 'False', 'shape': (1,), }",         // a string, not a bool
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': " + std::string(100, '(') + "}",  // nesting
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': " + std::string(60000, '[') + "}",
        "",
        "{}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': @}",
    };
    for (const std::string& dict : dicts) {
      CAPTURE(dict.substr(0, 80));
      CHECK_THROWS_AS(sdpa::parse_npy(npy_file(dict, four), "h.npy"), InputError);
    }
    CHECK(error_of(npy_file(dicts[0], four)) == "x.npy: malformed header: no 'descr' key");
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(npy_file(dicts[3], four), "h.npy"), doctest::Contains("h.npy: malformed header"), InputError);
    CHECK(error_of(npy_file(dicts[10], four)).find("duplicate key 'descr'") != std::string::npos);
    CHECK(error_of(npy_file(dicts[20], four)).find("nested too deeply") != std::string::npos);
  }

  TEST_CASE("Fortran order and unsupported dtypes") {
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "(2, 2)", "True"), std::vector<uint8_t>(16)), "f.npy"),
                         doctest::Contains("Fortran order is not supported"), InputError);
    for (const std::string descr : {"<f8", ">f4", "<i4", ">f2", "<b1", "=f4", "f4", "", "<f4 ", "<U10", "O"}) {
      CAPTURE(descr);
      const std::string message = error_of(npy_file(dict_for(descr, "(1,)"), std::vector<uint8_t>(4)));
      CHECK(message.find("accepted: '<f4' float32") != std::string::npos);
      if (descr[0] == '>') CHECK(message.find("big-endian") != std::string::npos);
    }
    CHECK(error_of(npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", std::vector<uint8_t>(4)))
              .find("accepted") != std::string::npos);
    CHECK(error_of(npy_file("{'descr': 4, 'fortran_order': False, 'shape': (1,)}", std::vector<uint8_t>(4))).find("accepted") !=
          std::string::npos);
  }

  TEST_CASE("negative, non-integer and overflowing dimensions") {
    const std::vector<uint8_t> four = {0, 0, 0, 0};
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "(-1,)"), four), "d"), doctest::Contains("negative dimension"),
                         InputError);
    CHECK_THROWS_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "(2, -2)"), four), "d"), InputError);
    for (const std::string shape : {"(2.5,)", "(1e3,)", "('2',)", "(None,)", "((1, 2),)", "(0x10,)", "(L,)", "(+1,)", "(1_0,)"}) {
      CAPTURE(shape);
      CHECK_THROWS_WITH_AS(sdpa::parse_npy(npy_file(dict_for("<f4", shape), four), "d"), doctest::Contains("not a non-negative integer"),
                           InputError);
    }
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "(99999999999999999999,)"), four), "d"),
                         doctest::Contains("overflows"), InputError);
    CHECK_THROWS_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "(9223372036854775808,)"), four), "d"), InputError);
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "(4294967296, 4294967296)"), four), "d"),
                         doctest::Contains("overflows int64"), InputError);
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "(4611686018427387904,)"), four), "d"),
                         doctest::Contains("byte count"), InputError);
    CHECK_THROWS_WITH_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "(9223372036854775807,)"), four), "d"),
                         doctest::Contains("byte count"), InputError);
    // A zero dimension makes the array empty, however large the others are.
    const NpyArray empty = sdpa::parse_npy(npy_file(dict_for("<f4", "(0, 4294967296, 4294967296)"), {}), "d");
    CHECK(empty.element_count() == 0);
    // The zero last: a running product overflows before it gets there (signed overflow, which the
    // UBSan build of CI aborts on; found by fuzz_npy).
    const NpyArray empty_last = sdpa::parse_npy(npy_file(dict_for("<u2", "(2121, 120, 21110, 211120, 21220, 0, 19)"), {}), "d");
    CHECK(empty_last.element_count() == 0);
    CHECK_THROWS_AS(sdpa::encode_npy_float32({2, -1}, nullptr), InputError);
  }

  TEST_CASE("data shorter or longer than the header declares") {
    const std::string dict = dict_for("<f4", "(2, 8, 128, 64)");
    CHECK(error_of(npy_file(dict, std::vector<uint8_t>(1000))) ==
          "x.npy: truncated: header says 2x8x128x64 float32 (524288 bytes of data) but the file has 1000");
    std::string longer = error_of(npy_file(dict_for("<f2", "(3,)"), std::vector<uint8_t>(7)));
    CHECK(longer.find("size mismatch") != std::string::npos);
    CHECK(longer.find("extra data") != std::string::npos);
    CHECK_THROWS_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "()"), std::vector<uint8_t>(3)), "d"), InputError);
    CHECK_THROWS_AS(sdpa::parse_npy(npy_file(dict_for("<f4", "()"), std::vector<uint8_t>(5)), "d"), InputError);
    CHECK_THROWS_AS(sdpa::parse_npy(npy_file(dict_for("|b1", "(0,)"), {1}), "d"), InputError);
    // Every proper prefix of a valid file is rejected.
    const float values[] = {1, 2, 3};
    const std::vector<uint8_t> good = sdpa::encode_npy_float32({3}, values);
    for (size_t n = 0; n < good.size(); ++n) {
      CAPTURE(n);
      CHECK_THROWS_AS(sdpa::parse_npy(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(n)), "p"), InputError);
    }
  }

  TEST_CASE("a file cut at every byte of its preamble, header and data: one line naming where it ends") {
    // Each prefix is its own allocation of exactly its size, so a read one byte past the end is
    // a heap overflow that the ASan build (CI's PRESET=asan) stops at. Without ASan the message
    // tells the same story: the reader must stop at the header length's check, not parse a
    // header that runs one byte past the file and fail later for another reason.
    const std::vector<uint8_t> six_floats(24, 0), three_bools = {1, 0, 1}, two_halves = {0x00, 0x3c, 0x00, 0xc0};
    struct Layout {
      int major;
      std::vector<uint8_t> file;
    };
    for (const Layout& layout : {Layout{1, npy_file(dict_for("<f4", "(2, 3)"), six_floats, 1)},
                                 Layout{2, npy_file(dict_for("|b1", "(3,)"), three_bools, 2)},
                                 Layout{3, npy_file(dict_for("<f2", "(2,)"), two_halves, 3)}}) {
      const std::vector<uint8_t>& good = layout.file;
      const size_t header_start = layout.major == 1 ? 10 : 12;
      size_t header_len = 0;
      for (size_t i = 8; i < header_start; ++i) header_len |= static_cast<size_t>(good[i]) << (8 * (i - 8));
      const size_t data_start = header_start + header_len;
      REQUIRE(data_start < good.size());
      CHECK_NOTHROW(sdpa::parse_npy(std::vector<uint8_t>(good.begin(), good.end()), "p.npy"));
      for (size_t n = 0; n < good.size(); ++n) {
        CAPTURE(layout.major);
        CAPTURE(n);
        const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
        const std::string message = error_of(cut);
        CHECK(message.find('\n') == std::string::npos);
        const std::string expected = n == 0                ? "x.npy: empty file"
                                     : n < 6               ? "x.npy: not a .npy file (bad magic"
                                     : n < header_start    ? "x.npy: truncated: the file ends inside the .npy preamble"
                                     : n < data_start      ? "x.npy: header length " + std::to_string(header_len) +
                                                            " runs past the end of the file (" + std::to_string(n) + " bytes)"
                                                           : "x.npy: truncated: header says ";
        CHECK_MESSAGE(message.rfind(expected, 0) == 0, message);
        if (n >= data_start) CHECK(message.find("but the file has " + std::to_string(n - data_start)) != std::string::npos);
      }
    }
  }

  TEST_CASE("a header length pointing past the end of the file, by one byte or by 4 GiB, is refused before it is used") {
    for (int major : {1, 2, 3}) {
      CAPTURE(major);
      const std::vector<uint8_t> good = npy_file(dict_for("<f4", "(1,)"), {0, 0, 0, 0}, major);
      const size_t room = good.size() - (major == 1 ? 10 : 12);  // the most the header could span
      for (const uint64_t header_len : {uint64_t{room} + 1, uint64_t{room} + 2, uint64_t{room} + 64, uint64_t{0xffff},
                                        major == 1 ? uint64_t{0xfffe} : uint64_t{0xffffffff}}) {
        CAPTURE(header_len);
        const std::vector<uint8_t> file = with_header_length(good, header_len);
        CHECK(error_of(file) == "x.npy: header length " + std::to_string(header_len) + " runs past the end of the file (" +
                                    std::to_string(file.size()) + " bytes)");
      }
      // Exactly to the end passes the length check: the header then takes in the data's 4 bytes
      // and is refused for what it holds, not for its length.
      CHECK(error_of(with_header_length(good, room)).find("runs past the end") == std::string::npos);
    }
  }

  TEST_CASE("a file cut short on disk: read_npy names the file and where it ends") {
    NpyTempDir dir;
    const float values[] = {1, 2, 3};
    const std::vector<uint8_t> good = sdpa::encode_npy_float32({3}, values);
    const size_t data_start = good.size() - 12;
    for (size_t n = 0; n < good.size(); ++n) {
      CAPTURE(n);
      const std::string path = dir.path + "/cut" + std::to_string(n) + ".npy";
      write_bytes(path, std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
      try {
        sdpa::read_npy(path);
        FAIL_CHECK("accepted a file of " << n << " of " << good.size() << " bytes");
      } catch (const InputError& e) {
        const std::string message = e.what();
        CHECK(message.rfind(path + ": ", 0) == 0);
        CHECK(message.find('\n') == std::string::npos);
        CHECK((n >= 10 && n < data_start) == (message.find("runs past the end") != std::string::npos));
        CHECK((n >= data_start) == (message.find("truncated: header says") != std::string::npos));
      }
    }
  }

  TEST_CASE("binary garbage is rejected with one printable line, never a crash") {
    std::mt19937 rng(99);
    const float values[] = {1, 2, 3, 4, 5, 6};
    const std::vector<uint8_t> good = sdpa::encode_npy_float32({2, 3}, values);
    int rejected = 0;
    for (int trial = 0; trial < 20000; ++trial) {
      std::vector<uint8_t> bytes;
      if (trial % 4 == 0) {  // pure noise, with or without the magic
        bytes.resize(rng() % 300);
        for (auto& b : bytes) b = static_cast<uint8_t>(rng());
        if (trial % 8 == 0 && bytes.size() >= 6) std::memcpy(bytes.data(), "\x93NUMPY", 6);
      } else {  // a valid file with a few bytes changed or cut
        bytes = good;
        for (unsigned k = 0, flips = 1 + rng() % 4; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
        if (trial % 3 == 0) bytes.resize(rng() % bytes.size());
      }
      try {
        const NpyArray a = sdpa::parse_npy(bytes, "g.npy");
        CHECK(static_cast<int64_t>(a.data.size()) == a.element_count() * (a.type == NpyType::float32 ? 4 : a.type == NpyType::bool8 ? 1 : 2));
      } catch (const InputError& e) {
        ++rejected;
        const std::string message = e.what();
        bool one_printable_line = message.rfind("g.npy: ", 0) == 0;
        for (unsigned char c : message) one_printable_line = one_printable_line && c >= 0x20 && c < 0x7f;
        if (!one_printable_line) FAIL_CHECK("not one printable line: " << message);
      }
    }
    CHECK(rejected > 10000);
  }

  TEST_CASE("writing over an existing file replaces it whole and leaves no temporary") {
    NpyTempDir dir;
    const std::string path = dir.path + "/out.npy";
    const std::vector<float> big(10000, 3.5f), small = {1, 2, 3};
    sdpa::write_npy_float32(path, {100, 100}, big.data());
    sdpa::write_npy_float32(path, {3}, small.data());
    const NpyArray a = sdpa::read_npy(path);
    CHECK(a.shape == std::vector<int64_t>{3});
    CHECK(floats_of(a) == small);
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    CHECK(static_cast<size_t>(f.tellg()) == sdpa::encode_npy_float32({3}, small.data()).size());
    CHECK(dir.entries() == std::vector<std::string>{"out.npy"});
    CHECK_THROWS_AS(sdpa::write_npy_float32(dir.path + "/no/such/dir/out.npy", {3}, small.data()), InputError);
    CHECK(dir.entries() == std::vector<std::string>{"out.npy"});
  }
}
