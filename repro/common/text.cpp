// text.cpp
#include "text.h"

#include "math_sdpa/errors.h"

#include <algorithm>
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

double parse_duration(const std::string& text, const std::string& option) {
  const auto bad = [&] { return InputError(option + ": '" + text.substr(0, 40) + "' is not a duration (90, 90s, 30m, 2h)"); };
  double factor = 1;
  std::string number = text;
  if (!number.empty() && (number.back() == 's' || number.back() == 'm' || number.back() == 'h')) {
    factor = number.back() == 'h' ? 3600 : number.back() == 'm' ? 60 : 1;
    number.pop_back();
  }
  if (number.find_first_of("0123456789") == std::string::npos || number.find_first_not_of("0123456789.") != std::string::npos || number.find('.') != number.rfind('.')) {
    throw bad();
  }
  const double value = std::stod(number) * factor;
  if (!(value > 0) || value > 30 * 86400.0) throw bad();
  return value;
}

std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates) {
  const auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_distance = std::max<size_t>(1, word.size() / 3) + 1;
  std::vector<std::string> started;
  for (const std::string& c : candidates) {
    const size_t d = distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
    if (word.size() >= 3 && c.rfind(word, 0) == 0) started.push_back(c);
  }
  if (best.empty() && started.size() == 1) best = started.front();
  return best;
}

}  // namespace sdpa
