// json_schema_check.cpp
#include "json_schema_check.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

namespace sdpa_test {

namespace {

using nlohmann::json;

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

// A schema and the document it belongs to (where its own "#..." references point).
struct Located {
  const json& document;
  const json& schema;
};

class Validator {
 public:
  Validator(const SchemaFiles* files, std::vector<std::string>& errors) : files_(files), errors_(errors) {}

  // `ref` read from inside `document`.
  Located resolve(const json& document, const std::string& ref) const {
    const size_t hash = ref.find('#');
    const std::string file = ref.substr(0, hash), fragment = hash == std::string::npos ? "" : ref.substr(hash);
    const json* root = &document;
    if (!file.empty()) {
      if (!files_ || !files_->count(file)) throw std::invalid_argument("unsupported $ref " + ref + " (no schema file " + file + ")");
      root = &files_->at(file);
    }
    if (fragment.empty() || fragment == "#") return {*root, *root};
    const std::string prefix = "#/$defs/";
    if (fragment.rfind(prefix, 0) != 0) throw std::invalid_argument("unsupported $ref " + ref);
    const std::string name = fragment.substr(prefix.size());
    if (!root->contains("$defs") || !root->at("$defs").contains(name)) throw std::invalid_argument("no definition for $ref " + ref);
    return {*root, root->at("$defs").at(name)};
  }

  void check(const Located& at_schema, const json& v, const std::string& path) {
    static const std::set<std::string> kAnnotations{"$schema", "$id", "title", "description", "$comment", "$defs"};
    static const std::set<std::string> kKeywords{"type", "required", "properties", "additionalProperties", "items", "enum",
                                                 "minimum", "minItems", "maxItems", "anyOf", "$ref"};
    const json& root = at_schema.document;
    const json& schema = at_schema.schema;
    if (!schema.is_object()) throw std::invalid_argument("a schema at " + path + " is not an object");
    for (const auto& item : schema.items()) {
      if (!kAnnotations.count(item.key()) && !kKeywords.count(item.key())) {
        throw std::invalid_argument("unsupported keyword " + item.key());
      }
    }
    const std::string at = path.empty() ? "(root)" : path;
    if (schema.contains("$ref")) check(resolve(root, schema.at("$ref").get<std::string>()), v, path);
    if (schema.contains("anyOf")) {
      // None matching: the complaints of the closest alternative of the right type (of a null
      // or an object: the object's), so a missing key is named where it is missing.
      std::vector<std::string> closest;
      bool any = false, typed = false;
      for (const auto& alternative : schema.at("anyOf")) {
        std::vector<std::string> errors;
        Validator(files_, errors).check({root, alternative}, v, path);
        any = any || errors.empty();
        const bool wrong_type = errors.size() == 1 && errors[0].rfind(at + ": ", 0) == 0 &&
                                errors[0].find(" is not of type ") != std::string::npos;
        if (!wrong_type && (!typed || errors.size() < closest.size())) closest = errors, typed = true;
      }
      if (!any) {
        if (!typed) closest = {at + ": " + v.dump().substr(0, 80) + " is of none of the types anyOf allows"};
        errors_.insert(errors_.end(), closest.begin(), closest.end());
        return;
      }
    }
    if (schema.contains("type")) {
      const json& t = schema.at("type");
      const std::vector<std::string> types = t.is_array() ? t.get<std::vector<std::string>>() : std::vector<std::string>{t.get<std::string>()};
      if (std::none_of(types.begin(), types.end(), [&](const std::string& type) { return has_type(v, type); })) {
        errors_.push_back(at + ": " + v.dump() + " is not of type " + t.dump());
        return;  // the other keywords would only repeat the complaint
      }
    }
    if (schema.contains("enum")) {
      const json& e = schema.at("enum");
      if (std::find(e.begin(), e.end(), v) == e.end()) errors_.push_back(at + ": " + v.dump() + " is not one of " + e.dump());
    }
    if (schema.contains("minimum") && v.is_number() && v.get<double>() < schema.at("minimum").get<double>()) {
      errors_.push_back(at + ": " + v.dump() + " is below the minimum " + schema.at("minimum").dump());
    }
    if (v.is_object()) {
      if (schema.contains("required")) {
        for (const auto& key : schema.at("required")) {
          if (!v.contains(key.get<std::string>())) errors_.push_back(at + ": required property " + key.dump() + " is missing");
        }
      }
      static const json kNoProperties = json::object();
      const json& properties = schema.contains("properties") ? schema.at("properties") : kNoProperties;
      for (const auto& item : v.items()) {
        const std::string child = path + "/" + item.key();
        if (properties.contains(item.key())) {
          check({root, properties.at(item.key())}, item.value(), child);
        } else if (schema.contains("additionalProperties")) {
          const json& extra = schema.at("additionalProperties");
          if (extra.is_boolean()) {
            if (!extra.get<bool>()) errors_.push_back(at + ": property \"" + item.key() + "\" is not allowed");
          } else {
            check({root, extra}, item.value(), child);
          }
        }
      }
    }
    if (v.is_array() && schema.contains("minItems") && v.size() < schema.at("minItems").get<size_t>()) {
      errors_.push_back(at + ": " + std::to_string(v.size()) + " items, fewer than " + schema.at("minItems").dump());
    }
    if (v.is_array() && schema.contains("maxItems") && v.size() > schema.at("maxItems").get<size_t>()) {
      errors_.push_back(at + ": " + std::to_string(v.size()) + " items, more than " + schema.at("maxItems").dump());
    }
    if (v.is_array() && schema.contains("items")) {
      for (size_t i = 0; i < v.size(); ++i) check({root, schema.at("items")}, v[i], path + "/" + std::to_string(i));
    }
  }

 private:
  const SchemaFiles* files_;
  std::vector<std::string>& errors_;
};

}  // namespace

std::vector<std::string> schema_errors(const json& root, const json& instance, const std::string& pointer) {
  std::vector<std::string> errors;
  Validator v(nullptr, errors);
  v.check(v.resolve(root, pointer), instance, "");
  return errors;
}

SchemaFiles load_schema_files(const std::string& folder) {
  SchemaFiles files;
  const std::string suffix = ".schema.json";
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    std::ifstream in(entry.path());
    files[name] = json::parse(in);
  }
  return files;
}

std::vector<std::string> schema_errors(const SchemaFiles& files, const std::string& file, const json& instance,
                                       const std::string& pointer) {
  if (!files.count(file)) throw std::invalid_argument("no schema file " + file);
  std::vector<std::string> errors;
  Validator v(&files, errors);
  v.check(v.resolve(files.at(file), pointer), instance, "");
  return errors;
}

}  // namespace sdpa_test
