// text.cpp
#include "text.h"

#include "math_sdpa/errors.h"
#include "math_sdpa/name_table.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace sdpa {

std::string one_line(std::string s) {
  for (auto& c : s) {
    if (c == '\n') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
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
