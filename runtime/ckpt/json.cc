#include "runtime/ckpt/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/base/status_macros.h"

namespace ds::ckpt {

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

void AppendJsonString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (u < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", u);
          *out += buf;
        } else {
          out->push_back(c);  // UTF-8 passes through unchanged.
        }
    }
  }
  out->push_back('"');
}

namespace {

void Newline(std::string* out, int indent, int depth) {
  if (indent < 0) return;
  out->push_back('\n');
  out->append(static_cast<size_t>(indent) * depth, ' ');
}

}  // namespace

void Json::DumpTo(std::string* out, int indent, int depth) const {
  switch (type_) {
    case Type::kNull:
      *out += "null";
      return;
    case Type::kBool:
      *out += bool_ ? "true" : "false";
      return;
    case Type::kInt:
      *out += std::to_string(int_);
      return;
    case Type::kDouble: {
      if (!std::isfinite(double_)) {
        *out += "null";
        return;
      }
      char buf[32];
      auto r = std::to_chars(buf, buf + sizeof(buf), double_);
      std::string_view text(buf, r.ptr - buf);
      *out += text;
      // Keep it a double when parsed back ("1" would come back as an integer).
      if (text.find_first_of(".eEn") == std::string_view::npos) *out += ".0";
      return;
    }
    case Type::kString:
      AppendJsonString(str_, out);
      return;
    case Type::kArray: {
      // Pretty output keeps arrays of scalars (shapes, offsets) on one line.
      bool flat = indent < 0;
      if (!flat) {
        flat = true;
        for (const Json& j : items_) flat = flat && !j.is_array() && !j.is_object();
      }
      out->push_back('[');
      for (size_t i = 0; i < items_.size(); ++i) {
        if (i) *out += (flat && indent >= 0) ? ", " : ",";
        if (!flat) Newline(out, indent, depth + 1);
        items_[i].DumpTo(out, indent, depth + 1);
      }
      if (!items_.empty() && !flat) Newline(out, indent, depth);
      out->push_back(']');
      return;
    }
    case Type::kObject: {
      out->push_back('{');
      for (size_t i = 0; i < members_.size(); ++i) {
        if (i) out->push_back(',');
        Newline(out, indent, depth + 1);
        AppendJsonString(members_[i].first, out);
        *out += indent < 0 ? ":" : ": ";
        members_[i].second.DumpTo(out, indent, depth + 1);
      }
      if (!members_.empty()) Newline(out, indent, depth);
      out->push_back('}');
      return;
    }
  }
}

std::string Json::Dump(int indent) const {
  std::string out;
  DumpTo(&out, indent, 0);
  return out;
}

}  // namespace ds::ckpt
