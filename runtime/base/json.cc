#include "runtime/base/json.h"

#include <nlohmann/json.hpp>

namespace ds {

Json Json::Bool(bool b) {
  Json j;
  j.type_ = Type::kBool;
  j.bool_ = b;
  return j;
}

Json Json::Int(int64_t v) {
  Json j;
  j.type_ = Type::kInt;
  j.int_ = v;
  return j;
}

Json Json::Double(double v) {
  Json j;
  j.type_ = Type::kDouble;
  j.double_ = v;
  return j;
}

Json Json::String(std::string s) {
  Json j;
  j.type_ = Type::kString;
  j.str_ = std::move(s);
  return j;
}

Json Json::Array(std::vector<Json> items) {
  Json j;
  j.type_ = Type::kArray;
  j.items_ = std::move(items);
  return j;
}

Json Json::Object() {
  Json j;
  j.type_ = Type::kObject;
  return j;
}

int64_t Json::as_int() const {
  if (type_ == Type::kInt) return int_;
  if (type_ == Type::kDouble) return static_cast<int64_t>(double_);
  return 0;
}

double Json::as_double() const {
  if (type_ == Type::kDouble) return double_;
  if (type_ == Type::kInt) return static_cast<double>(int_);
  return 0;
}

const Json* Json::Find(std::string_view key) const {
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

void Json::Set(std::string key, Json value) {
  for (Member& m : members_) {
    if (m.first == key) {
      m.second = std::move(value);
      return;
    }
  }
  members_.emplace_back(std::move(key), std::move(value));
}

bool Json::operator==(const Json& o) const {
  if (type_ != o.type_) return false;
  switch (type_) {
    case Type::kNull:
      return true;
    case Type::kBool:
      return bool_ == o.bool_;
    case Type::kInt:
      return int_ == o.int_;
    case Type::kDouble:
      return double_ == o.double_;
    case Type::kString:
      return str_ == o.str_;
    case Type::kArray:
      return items_ == o.items_;
    case Type::kObject:
      return members_ == o.members_;
  }
  return false;
}

namespace {

using Ordered = nlohmann::ordered_json;

Ordered ToLibrary(const Json& j) {
  switch (j.type()) {
    case Json::Type::kNull:
      return nullptr;
    case Json::Type::kBool:
      return j.as_bool();
    case Json::Type::kInt:
      return j.as_int();
    case Json::Type::kDouble:
      return j.as_double();  // NaN and inf dump as null
    case Json::Type::kString:
      return j.as_string();
    case Json::Type::kArray: {
      Ordered a = Ordered::array();
      for (const Json& item : j.items()) a.push_back(ToLibrary(item));
      return a;
    }
    case Json::Type::kObject: {
      Ordered o = Ordered::object();
      for (const Json::Member& m : j.members()) o[m.first] = ToLibrary(m.second);
      return o;
    }
  }
  return nullptr;
}

}  // namespace

std::string Json::Dump(int indent) const {
  // Invalid UTF-8 in a string is written as U+FFFD rather than aborting the write.
  return ToLibrary(*this).dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

void AppendJsonString(std::string_view s, std::string* out) {
  *out += Ordered(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace ds
