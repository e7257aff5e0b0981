// name_table.h: the one list of names of an enum, read both ways.
//
// Printing, parsing and the "expected a|b|c" of an error message all walk the same entries, so
// a value that can be printed can be parsed back, and an error lists exactly what is accepted.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"

namespace sdpa {

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
  // Throws InputError naming `what` and every accepted value.
  E parse(const std::string& s) const {
    if (const auto value = find(s)) return *value;
    throw InputError(std::string(what) + ": unknown value '" + s + "' (expected " + accepted() + ")");
  }
};

}  // namespace sdpa
