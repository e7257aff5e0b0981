// name_table.h: the one list of names of an enum, read both ways, and the one way a word outside
// a closed set is refused.
//
// Printing, parsing and the "expected a|b|c" of an error message all walk the same entries, so
// a value that can be printed can be parsed back, and an error lists exactly what is accepted.
// Every closed set of words the harness reads (an enum's names, an option's choices, a command
// or a help topic) is refused through unknown_value, so each names the word it most likely meant.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"

namespace sdpa {

// The candidate a mistyped `word` most likely meant ("--batch" for "--batchh", "triage" for
// "trige", "hang" for "hnag"): the nearest by edit distance (an insertion, a deletion, a change or
// two neighbours swapped each count one), within a third of the word's length (at least 1), or
// the only candidate `word` starts; empty when none is near enough.
inline std::string nearest_word(const std::string& word, const std::vector<std::string>& candidates) {
  const auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
    return d[a.size()][b.size()];
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

// A word as an error line quotes it: its first 40 characters, a control character (a newline)
// shown as a space, so that the line stays one line.
inline std::string quoted_word(const std::string& word) {
  std::string s = word.substr(0, 40);
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return "'" + s + "'" + (word.size() > 40 ? "..." : "");
}

// "unknown topic 'scenario' (did you mean scenarios? expected options|scenarios|...)": the line
// for a word outside a closed set, naming the accepted word nearest to it where one is near.
inline std::string unknown_word(const std::string& kind, const std::string& word, const std::vector<std::string>& accepted) {
  std::string list;
  for (const std::string& a : accepted) list += (list.empty() ? "" : "|") + a;
  const std::string meant = nearest_word(word, accepted);
  return "unknown " + kind + " " + quoted_word(word) + " (" + (meant.empty() ? "" : "did you mean " + meant + "? ") +
         "expected " + list + ")";
}

// "--alloc: unknown value 'managd' (did you mean managed? expected managed|device|...)": an
// option's value outside its set.
inline std::string unknown_value(const std::string& what, const std::string& value, const std::vector<std::string>& accepted) {
  return what + ": " + unknown_word("value", value, accepted);
}

template <typename E> struct NameTable {
  const char* what;  // "--alloc", for error messages
  std::vector<std::pair<E, const char*>> entries;

  const char* name(E e) const {
    for (const auto& [value, text] : entries) {
      if (value == e) return text;
    }
    return "?";
  }
  std::optional<E> find(const std::string& s) const {
    for (const auto& [value, text] : entries) {
      if (s == text) return value;
    }
    return std::nullopt;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> list;
    for (const auto& entry : entries) list.emplace_back(entry.second);
    return list;
  }
  std::string accepted() const {
    std::string list;
    for (const auto& entry : entries) list += list.empty() ? entry.second : std::string("|") + entry.second;
    return list;
  }
  // Throws InputError naming `what`, the word nearest `s` and every accepted value.
  E parse(const std::string& s) const {
    if (const auto value = find(s)) return *value;
    throw InputError(unknown_value(what, s, names()));
  }
};

}  // namespace sdpa
