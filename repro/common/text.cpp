// text.cpp
#include "text.h"

#include <cstdio>
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

}  // namespace sdpa
