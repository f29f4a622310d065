#include "controller/importer/yaml_writer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string_view>

namespace kwd::importer {
namespace {

using Json = nlohmann::ordered_json;

// Strings that YAML 1.1/1.2 readers would take as a boolean, null or number.
bool LooksLikeOtherScalar(std::string_view text) {
  static constexpr std::array<std::string_view, 22> kWords = {
      "true",  "false", "yes",  "no",   "on",    "off",  "y",     "n",   "null", "~",    ".inf",
      "-.inf", "+.inf", ".nan", "True", "False", "TRUE", "FALSE", "Yes", "No",   "Null", "NULL"};
  for (std::string_view word : kWords) {
    if (text.size() == word.size() &&
        std::equal(text.begin(), text.end(), word.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        })) {
      return true;
    }
  }
  // Anything that starts like a number (digits, sign, dot) is quoted.
  char c = text.front();
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.';
}

bool IsPlainSafe(std::string_view text) {
  if (text.empty() || LooksLikeOtherScalar(text)) {
    return false;
  }
  for (char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '/' || c == '_' || c == '.' || c == '-' || c == '~';
    if (!ok) {
      return false;
    }
  }
  return true;
}

// The length of a UTF-8 sequence at `i` that YAML does not allow unescaped
// (C1 controls but NEL, U+FFFE, U+FFFF), else 0.
std::size_t NonPrintableAt(std::string_view text, std::size_t i) {
  auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  if (byte(i) == 0xC2 && i + 1 < text.size() && byte(i + 1) >= 0x80 && byte(i + 1) <= 0x9F &&
      byte(i + 1) != 0x85) {
    return 2;
  }
  if (byte(i) == 0xEF && i + 2 < text.size() && byte(i + 1) == 0xBF &&
      (byte(i + 2) == 0xBE || byte(i + 2) == 0xBF)) {
    return 3;
  }
  return 0;
}

std::string Quoted(const std::string& text) {
  // A JSON string is a valid YAML double-quoted scalar, once the characters
  // YAML does not print are escaped too. Invalid UTF-8 is replaced rather
  // than thrown on (the importer converts files first).
  std::string json = Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
  std::string out;
  out.reserve(json.size());
  for (std::size_t i = 0; i < json.size();) {
    std::size_t n = NonPrintableAt(json, i);
    if (n == 0) {
      out.push_back(json[i++]);
      continue;
    }
    unsigned code = n == 2 ? static_cast<unsigned char>(json[i + 1])
                           : 0xFF00u | (static_cast<unsigned char>(json[i + 2]) - 0x80u + 0xC0u);
    static constexpr char kHex[] = "0123456789ABCDEF";
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) {
      out.push_back(kHex[(code >> shift) & 0xF]);
    }
    i += n;
  }
  return out;
}

bool IsValidUtf8(std::string_view text) {
  try {
    (void)Json(std::string(text)).dump();
  } catch (const Json::exception&) {
    return false;
  }
  return true;
}

// Multi-line text a literal block can carry exactly: printable, no CR, no
// tabs or spaces that would end a line (YAML keeps them, but editors do not).
bool FitsLiteralBlock(const std::string& text) {
  if (text.find('\n') == std::string::npos || !IsValidUtf8(text)) {
    return false;
  }
  for (std::size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f || NonPrintableAt(text, i) > 0) {
      return false;
    }
  }
  // A block whose first line is blank needs an indentation indicator and a
  // whole-blank text reads back as empty: quote those.
  std::size_t first = text.find_first_not_of('\n');
  return first != std::string::npos && text.find_first_not_of(" \n") != std::string::npos;
}

void WriteLiteral(const std::string& text, int indent, std::string* out) {
  std::size_t trailing = text.size() - text.find_last_not_of('\n') - 1;
  *out += "|";
  if (text.front() == ' ' || text.front() == '\n') {
    *out += "2";  // indentation indicator: the content's own leading spaces stay
  }
  *out += trailing == 0 ? "-" : trailing == 1 ? "" : "+";
  *out += "\n";
  std::string pad(static_cast<std::size_t>(indent) + 2, ' ');
  std::size_t start = 0;
  std::string_view body(text);
  body.remove_suffix(trailing);
  while (start <= body.size()) {
    std::size_t end = body.find('\n', start);
    std::string_view line =
        body.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (!line.empty()) {
      *out += pad;
      out->append(line);
    }
    *out += "\n";
    if (end == std::string_view::npos) {
      break;
    }
    start = end + 1;
  }
  for (std::size_t i = 1; i < trailing; ++i) {
    *out += "\n";
  }
}

void WriteScalar(const Json& value, int indent, std::string* out) {
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (FitsLiteralBlock(text)) {
      WriteLiteral(text, indent, out);
      return;
    }
    *out += IsPlainSafe(text) ? text : Quoted(text);
  } else {
    *out += value.dump();  // numbers, booleans, null
  }
  *out += "\n";
}

bool IsEmptyContainer(const Json& value) {
  return (value.is_object() || value.is_array()) && value.empty();
}

std::string Key(const std::string& key) {
  return IsPlainSafe(key) ? key : Quoted(key);
}

void WriteValue(const Json& value, int indent, std::string* out);

// `value` after "key:" or "- ": inline for scalars and empty containers,
// on the next lines otherwise.
void WriteAfterIndicator(const Json& value, int indent, std::string* out) {
  if (IsEmptyContainer(value)) {
    *out += value.is_object() ? " {}\n" : " []\n";
  } else if (value.is_object() || value.is_array()) {
    *out += "\n";
    WriteValue(value, indent, out);
  } else {
    *out += " ";
    WriteScalar(value, indent - 2, out);
  }
}

void WriteValue(const Json& value, int indent, std::string* out) {
  std::string pad(static_cast<std::size_t>(indent), ' ');
  if (value.is_object()) {
    for (const auto& [key, item] : value.items()) {
      *out += pad + Key(key) + ":";
      WriteAfterIndicator(item, indent + 2, out);
    }
  } else if (value.is_array()) {
    for (const auto& item : value) {
      *out += pad + "-";
      if (item.is_object() && !item.empty()) {
        // "- key: value" with the rest of the mapping aligned under the key.
        std::string nested;
        WriteValue(item, indent + 2, &nested);
        out->append(nested.substr(static_cast<std::size_t>(indent) + 1));
      } else {
        WriteAfterIndicator(item, indent + 2, out);
      }
    }
  } else {
    WriteScalar(value, indent, out);
  }
}

}  // namespace

std::string ToYaml(const nlohmann::ordered_json& value) {
  std::string out;
  if (IsEmptyContainer(value) || !(value.is_object() || value.is_array())) {
    WriteAfterIndicator(value, 0, &out);
    return out.substr(1);
  }
  WriteValue(value, 0, &out);
  return out;
}

}  // namespace kwd::importer
