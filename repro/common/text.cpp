// text.cpp
#include "text.h"

#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace sdpa {

namespace {

// nlohmann::json's message, its "[json.exception.KIND.ID] " already taken off.
std::string json_words(std::string m) {
  const std::string parse = "parse error at ", syntax = ": syntax error while parsing ";
  if (m.rfind(parse, 0) == 0) {
    m = m.substr(parse.size());  // "line 1, column 2: syntax error while parsing value - invalid literal; ..."
    const size_t at = m.find(syntax), dash = m.find(" - ");
    if (at != std::string::npos && dash != std::string::npos && dash > at) m = m.substr(0, at) + ": " + m.substr(dash + 3);
    return m;
  }
  if (m.rfind("parse error: ", 0) == 0) return m.substr(13);
  const std::string key = "key '";
  if (m.rfind(key, 0) == 0 && m.size() > 10 && m.compare(m.size() - 10, 10, " not found") == 0) return "no " + m.substr(0, m.size() - 10);
  const std::string type = "type must be ", but = ", but is ";
  if (m.rfind(type, 0) == 0 && m.find(but) != std::string::npos) {
    const size_t b = m.find(but);
    const auto a = [](const std::string& t) { return t == "null" ? t : (t[0] == 'a' || t[0] == 'o' ? "an " : "a ") + t; };
    return a(m.substr(type.size(), b - type.size())) + " was expected, not " + a(m.substr(b + but.size()));
  }
  return m;
}

// A library's message inside `s` (one_line's second half).
std::string library_words(std::string s) {
  const std::string json_head = "[json.exception.";
  for (size_t at; (at = s.find(json_head)) != std::string::npos;) {
    const size_t close = s.find("] ", at);
    if (close == std::string::npos) break;
    // The library's message runs to the end, or to the ")" that closes the parenthesis it is in.
    size_t stop = s.size();
    if (at > 0 && s[at - 1] == '(') {
      int depth = 1;
      for (size_t i = close; i < s.size() && stop == s.size(); ++i) {
        depth += s[i] == '(' ? 1 : s[i] == ')' ? -1 : 0;
        if (depth == 0) stop = i;
      }
    }
    s = s.substr(0, at) + json_words(s.substr(close + 2, stop - close - 2)) + s.substr(stop);
  }
  const std::string fs_head = "filesystem error: ";
  if (const size_t at = s.find(fs_head); at != std::string::npos) {
    // "filesystem error: OPERATION: REASON [PATH]" (and a second [PATH] for a copy or a rename).
    std::string m = s.substr(at + fs_head.size());
    const size_t colon = m.find(": "), bracket = m.find(" [");
    if (colon != std::string::npos && bracket != std::string::npos && colon < bracket) {
      const size_t close = m.find(']', bracket);
      const std::string path = m.substr(bracket + 2, close == std::string::npos ? std::string::npos : close - bracket - 2);
      m = quoted_word(path) + ": " + m.substr(colon + 2, bracket - colon - 2);
    }
    s = s.substr(0, at) + m;
  }
  return s;
}

}  // namespace

std::string one_line(std::string s) {
  for (auto& c : s) {
    if (c == '\n') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return library_words(s);
}

std::string format_number(const char* printf_format, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, x);
  return buf;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

double parse_duration(const std::string& text, const std::string& option) {
  const auto bad = [&] { return InputError(option + ": " + quoted_word(text) + " is not a duration up to 30 days (90, 90s, 30m, 2h)"); };
  double factor = 1;
  std::string number = text;
  if (!number.empty() && (number.back() == 's' || number.back() == 'm' || number.back() == 'h')) {
    factor = number.back() == 'h' ? 3600 : number.back() == 'm' ? 60 : 1;
    number.pop_back();
  }
  if (number.find_first_of("0123456789") == std::string::npos || number.find_first_not_of("0123456789.") != std::string::npos || number.find('.') != number.rfind('.')) {
    throw bad();
  }
  const double value = std::strtod(number.c_str(), nullptr) * factor;  // digits only: a huge one is inf, refused below
  if (!(value > 0) || value > 30 * 86400.0) throw bad();
  return value;
}

}  // namespace sdpa
