// json_schema_check.cpp
#include "json_schema_check.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

namespace sdpa_test {

namespace {

using nlohmann::json;

const json& resolve(const json& root, const std::string& ref) {
  if (ref.empty() || ref == "#") return root;
  const std::string prefix = "#/$defs/";
  if (ref.rfind(prefix, 0) != 0) throw std::invalid_argument("unsupported $ref " + ref);
  const std::string name = ref.substr(prefix.size());
  if (!root.contains("$defs") || !root.at("$defs").contains(name)) throw std::invalid_argument("no definition for $ref " + ref);
  return root.at("$defs").at(name);
}

bool has_type(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "number") return v.is_number();
  // JSON Schema counts 2.0 as an integer too.
  if (type == "integer") return v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
  throw std::invalid_argument("unknown type " + type);
}

void check(const json& root, const json& schema, const json& v, const std::string& path, std::vector<std::string>& errors) {
  static const std::set<std::string> kAnnotations{"$schema", "$id", "title", "description", "$comment", "$defs"};
  static const std::set<std::string> kKeywords{"type", "required", "properties", "additionalProperties", "items", "enum",
                                               "minimum", "$ref"};
  if (!schema.is_object()) throw std::invalid_argument("a schema at " + path + " is not an object");
  for (const auto& item : schema.items()) {
    if (!kAnnotations.count(item.key()) && !kKeywords.count(item.key())) {
      throw std::invalid_argument("unsupported keyword " + item.key());
    }
  }
  const std::string at = path.empty() ? "(root)" : path;
  if (schema.contains("$ref")) check(root, resolve(root, schema.at("$ref").get<std::string>()), v, path, errors);
  if (schema.contains("type")) {
    const json& t = schema.at("type");
    const std::vector<std::string> types = t.is_array() ? t.get<std::vector<std::string>>() : std::vector<std::string>{t.get<std::string>()};
    if (std::none_of(types.begin(), types.end(), [&](const std::string& type) { return has_type(v, type); })) {
      errors.push_back(at + ": " + v.dump() + " is not of type " + t.dump());
      return;  // the other keywords would only repeat the complaint
    }
  }
  if (schema.contains("enum")) {
    const json& e = schema.at("enum");
    if (std::find(e.begin(), e.end(), v) == e.end()) errors.push_back(at + ": " + v.dump() + " is not one of " + e.dump());
  }
  if (schema.contains("minimum") && v.is_number() && v.get<double>() < schema.at("minimum").get<double>()) {
    errors.push_back(at + ": " + v.dump() + " is below the minimum " + schema.at("minimum").dump());
  }
  if (v.is_object()) {
    if (schema.contains("required")) {
      for (const auto& key : schema.at("required")) {
        if (!v.contains(key.get<std::string>())) errors.push_back(at + ": required property " + key.dump() + " is missing");
      }
    }
    const json properties = schema.value("properties", json::object());
    for (const auto& item : v.items()) {
      const std::string child = path + "/" + item.key();
      if (properties.contains(item.key())) {
        check(root, properties.at(item.key()), item.value(), child, errors);
      } else if (schema.contains("additionalProperties")) {
        const json& extra = schema.at("additionalProperties");
        if (extra.is_boolean()) {
          if (!extra.get<bool>()) errors.push_back(at + ": property \"" + item.key() + "\" is not allowed");
        } else {
          check(root, extra, item.value(), child, errors);
        }
      }
    }
  }
  if (v.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < v.size(); ++i) check(root, schema.at("items"), v[i], path + "/" + std::to_string(i), errors);
  }
}

}  // namespace

std::vector<std::string> schema_errors(const json& root, const json& instance, const std::string& pointer) {
  std::vector<std::string> errors;
  check(root, resolve(root, pointer), instance, "", errors);
  return errors;
}

}  // namespace sdpa_test
