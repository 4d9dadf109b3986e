// Strict safetensors reader: every header claim is checked against the bytes before use,
// and the header is parsed by a bounded, iterative parser that knows the schema.
#include "safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string_view>

#include "dsv4kv/spec/checked.hpp"

namespace dsv4kv::conformance {

namespace {

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// Appended rather than `"'" + printable(s)`, which GCC 12 -O3 misreads as an overlapping copy (-Wrestrict).
std::string quoted(std::string_view s) {
  std::string q(1, '\'');
  q += printable(s);
  q += '\'';
  return q;
}

bool supported_dtype(std::string_view s, StDType* out) {
  if (s == "BF16")
    *out = StDType::kBF16;
  else if (s == "U8")
    *out = StDType::kU8;
  else if (s == "I32")
    *out = StDType::kI32;
  else if (s == "I64")
    *out = StDType::kI64;
  else if (s == "BOOL")
    *out = StDType::kBool;
  else
    return false;
  return true;
}

/// Bits per element of the other dtypes the safetensors format defines; 0 for
/// a name it does not define. Their byte sizes are still checked.
int other_dtype_bits(std::string_view s) {
  static constexpr std::pair<std::string_view, int> kBits[] = {
      {"F64", 64},    {"F32", 32},    {"F16", 16},    {"I16", 16},    {"I8", 8},      {"U64", 64},
      {"U32", 32},    {"U16", 16},    {"F8_E4M3", 8}, {"F8_E5M2", 8}, {"F8_E8M0", 8}, {"E8M0", 8},
      {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"F4", 4},      {"C64", 64},    {"C128", 128},
  };
  for (const auto& [name, bits] : kBits)
    if (s == name) return bits;
  return 0;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i == 8 && shape.size() > 9) {
      r += ", ... (" + std::to_string(shape.size()) + " dims)";
      break;
    }
    r += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return r + "]";
}

/// What the header parser hands back.
struct Header {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
};

// ---------------------------------------------------------------------------
// The header parser. It follows the schema (an object of tensor entries and
// one optional string map) instead of building a JSON tree, so the only nesting
// it ever meets is that of an unknown field it skips, which it walks with an
// explicit, bounded stack. Strict JSON (RFC 8259) otherwise.
// ---------------------------------------------------------------------------
class HeaderParser {
 public:
  HeaderParser(const std::string& origin, const char* begin, const char* end)
      : origin_(origin), begin_(begin), p_(begin), end_(end) {}

  Header parse() {
    Header h;
    std::set<std::string> names;
    bool have_metadata = false;
    expect('{', "'{'");
    if (!peek_consume('}')) {
      for (;;) {
        const size_t key_at = offset();
        std::string key = string();
        expect(':', "':'");
        if (key == "__metadata__") {
          if (have_metadata) schema("duplicate key '__metadata__'");
          have_metadata = true;
          metadata(h.metadata);
        } else {
          if (!names.insert(key).second)
            schema("duplicate tensor name " + quoted(key) + " (at file byte " + std::to_string(key_at) + ")");
          h.tensors.push_back(entry(std::move(key)));
        }
        if (peek_consume(',')) continue;
        expect('}', "',' or '}'");
        break;
      }
    }
    ws();
    if (p_ != end_) syntax("unexpected " + here() + " after the header object (only spaces may follow it)");
    return h;
  }

 private:
  // Byte offset in the file (the header starts at byte 8).
  size_t offset() const { return 8 + static_cast<size_t>(p_ - begin_); }

  std::string here() const {
    if (p_ >= end_) return "end of the header";
    const auto c = static_cast<unsigned char>(*p_);
    char buf[16];
    if (c >= 0x21 && c < 0x7F)
      std::snprintf(buf, sizeof buf, "'%c'", c);
    else
      std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
    return buf;
  }

  [[noreturn]] void syntax(const std::string& what) const {
    throw SafetensorsError(origin_ + ": invalid JSON header at file byte " + std::to_string(offset()) + ": " + what);
  }
  [[noreturn]] void schema(const std::string& what) const { throw SafetensorsError(origin_ + ": " + what); }

  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  /// Skips spaces; true (and consumes it) when the next byte is `c`.
  bool peek_consume(char c) {
    ws();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  /// Skips spaces; true when the next byte is `c` (not consumed).
  bool next_is(char c) {
    ws();
    return p_ < end_ && *p_ == c;
  }
  void expect(char c, const char* what) {
    if (!peek_consume(c)) syntax(std::string("expected ") + what + ", found " + here());
  }

  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  uint32_t hex4() {
    if (end_ - p_ < 4) syntax("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = hex_digit(p_[i]);
      if (d < 0) syntax("invalid \\u escape");
      v = v << 4 | static_cast<uint32_t>(d);
    }
    p_ += 4;
    return v;
  }
  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  /// A JSON string: escapes decoded, UTF-8 validated, control bytes (NUL included) refused.
  std::string string() {
    ws();
    if (p_ >= end_ || *p_ != '"') syntax("expected a string, found " + here());
    ++p_;
    std::string out;
    for (;;) {
      if (p_ >= end_) syntax("unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return out;
      }
      if (c < 0x20) syntax("control " + here() + " inside a string");
      if (c == '\\') {
        ++p_;
        if (p_ >= end_) syntax("unterminated string");
        const char e = *p_++;
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = hex4();
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') syntax("unpaired surrogate in a \\u escape");
              p_ += 2;
              const uint32_t lo = hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) syntax("unpaired surrogate in a \\u escape");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
              syntax("unpaired surrogate in a \\u escape");
            }
            put_utf8(out, cp);
            break;
          }
          default: --p_; syntax("invalid escape \\" + here());
        }
        continue;
      }
      if (c < 0x80) {
        out += static_cast<char>(c);
        ++p_;
        continue;
      }
      // UTF-8: shortest form only, no surrogates, at most U+10FFFF.
      int len = 0;
      uint32_t cp = 0, min = 0;
      if ((c & 0xE0) == 0xC0)
        len = 2, cp = c & 0x1F, min = 0x80;
      else if ((c & 0xF0) == 0xE0)
        len = 3, cp = c & 0x0F, min = 0x800;
      else if ((c & 0xF8) == 0xF0)
        len = 4, cp = c & 0x07, min = 0x10000;
      else
        syntax("invalid UTF-8 in a string");
      if (end_ - p_ < len) syntax("invalid UTF-8 in a string");
      for (int i = 1; i < len; ++i) {
        const auto b = static_cast<unsigned char>(p_[i]);
        if ((b & 0xC0) != 0x80) syntax("invalid UTF-8 in a string");
        cp = cp << 6 | (b & 0x3F);
      }
      if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) syntax("invalid UTF-8 in a string");
      out.append(p_, static_cast<size_t>(len));
      p_ += len;
    }
  }

  /// Scans one JSON number (grammar checked) and returns its text.
  std::string_view number() {
    ws();
    const char* s = p_;
    auto digits = [&] {
      const char* d = p_;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      return p_ > d;
    };
    if (p_ < end_ && *p_ == '-') ++p_;
    if (p_ < end_ && *p_ == '0')
      ++p_;
    else if (!(p_ < end_ && *p_ >= '1' && *p_ <= '9' && digits()))
      syntax("expected a value, found " + here());
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (!digits()) syntax("expected a digit after '.', found " + here());
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!digits()) syntax("expected an exponent, found " + here());
    }
    return {s, static_cast<size_t>(p_ - s)};
  }

  /// True when the next value starts like a number.
  bool number_ahead() {
    ws();
    return p_ < end_ && (*p_ == '-' || (*p_ >= '0' && *p_ <= '9'));
  }

  /// A number that must be a plain non-negative integer no larger than `max`;
  /// nullopt (with the text in *text) when it is another number.
  std::optional<uint64_t> uint_value(uint64_t max, std::string* text) {
    const std::string_view t = number();
    *text = std::string(t.substr(0, 40));
    uint64_t v = 0;
    for (char c : t) {
      if (c < '0' || c > '9') return std::nullopt;  // sign, fraction or exponent
      const auto m = checked::mul<uint64_t>(v, 10);
      const auto a = m ? checked::add<uint64_t>(*m, static_cast<uint64_t>(c - '0')) : std::nullopt;
      if (!a) return std::nullopt;
      v = *a;
    }
    if (v > max) return std::nullopt;
    return v;
  }

  /// Skips any JSON value with an explicit stack (a field this reader does not use).
  void skip_value() {
    char stack[kMaxJsonDepth];
    int depth = 0;
    for (;;) {
      // A value starts here.
      ws();
      bool closed = false;  // true once a complete value has been consumed
      if (p_ >= end_) syntax("expected a value, found end of the header");
      const char c = *p_;
      if (c == '{' || c == '[') {
        if (depth == kMaxJsonDepth) syntax("nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
        stack[depth++] = c;
        ++p_;
        if (peek_consume(c == '{' ? '}' : ']')) {
          --depth;
          closed = true;
        } else if (c == '{') {
          string();
          expect(':', "':'");
        }
      } else if (c == '"') {
        string();
        closed = true;
      } else if (c == '-' || (c >= '0' && c <= '9')) {
        number();
        closed = true;
      } else {
        static constexpr std::string_view kLiterals[] = {"true", "false", "null"};
        for (const auto lit : kLiterals)
          if (static_cast<size_t>(end_ - p_) >= lit.size() && std::string_view(p_, lit.size()) == lit) {
            p_ += lit.size();
            closed = true;
            break;
          }
        if (!closed) syntax("expected a value, found " + here());
      }
      if (!closed) continue;
      // After a complete value: close containers until a ',' starts the next value.
      for (;;) {
        if (depth == 0) return;
        const char top = stack[depth - 1];
        if (peek_consume(',')) {
          if (top == '{') {
            string();
            expect(':', "':'");
          }
          break;
        }
        expect(top == '{' ? '}' : ']', top == '{' ? "',' or '}'" : "',' or ']'");
        --depth;
      }
    }
  }

  void metadata(std::map<std::string, std::string>& out) {
    if (!next_is('{')) schema("__metadata__ is not an object");
    ++p_;
    if (peek_consume('}')) return;
    for (;;) {
      std::string key = string();
      expect(':', "':'");
      if (!next_is('"')) schema("__metadata__ value of " + quoted(key) + " is not a string");
      std::string value = string();
      if (!out.emplace(key, std::move(value)).second) schema("duplicate __metadata__ key " + quoted(key));
      if (peek_consume(',')) continue;
      expect('}', "',' or '}'");
      return;
    }
  }

  TensorInfo entry(std::string name) {
    const std::string where = "tensor " + quoted(name);
    if (!next_is('{')) schema(where + ": entry is not an object");
    ++p_;
    TensorInfo info;
    info.name = std::move(name);
    bool have_dtype = false, have_shape = false, have_offsets = false;
    if (!peek_consume('}')) {
      for (;;) {
        const std::string field = string();
        expect(':', "':'");
        auto once = [&](bool& seen) {
          if (seen) schema(where + ": duplicate field " + quoted(field));
          seen = true;
        };
        if (field == "dtype") {
          once(have_dtype);
          if (!next_is('"')) schema(where + ": dtype is not a string");
          info.dtype_name = string();
        } else if (field == "shape") {
          once(have_shape);
          if (!next_is('[')) schema(where + ": shape is not an array");
          ++p_;
          if (!peek_consume(']')) {
            for (;;) {
              std::string text;
              if (!number_ahead()) schema(where + ": shape entry " + here() + " is not a non-negative integer");
              const auto d = uint_value(kInt64Max, &text);
              if (!d) schema(where + ": shape entry " + text + " is not a non-negative integer below 2^63");
              if (info.shape.size() == kMaxRank)
                schema(where + ": rank above the limit of " + std::to_string(kMaxRank));
              info.shape.push_back(static_cast<int64_t>(*d));
              if (peek_consume(',')) continue;
              expect(']', "',' or ']'");
              break;
            }
          }
        } else if (field == "data_offsets") {
          once(have_offsets);
          if (!next_is('[')) schema(where + ": data_offsets is not a [begin, end] pair");
          ++p_;
          uint64_t v[2] = {0, 0};
          int n = 0;
          if (!peek_consume(']')) {
            for (;;) {
              if (n == 2) schema(where + ": data_offsets is not a [begin, end] pair");
              std::string text;
              if (!number_ahead()) schema(where + ": data_offsets entries are not non-negative integers");
              const auto o = uint_value(std::numeric_limits<uint64_t>::max(), &text);
              if (!o) schema(where + ": data_offsets entries are not non-negative integers (" + text + ")");
              v[n++] = *o;
              if (peek_consume(',')) continue;
              expect(']', "',' or ']'");
              break;
            }
          }
          if (n != 2) schema(where + ": data_offsets is not a [begin, end] pair");
          info.begin = v[0];
          info.end = v[1];
        } else {
          skip_value();  // fields the format may add later are ignored, as the reference implementation does
        }
        if (peek_consume(',')) continue;
        expect('}', "',' or '}'");
        break;
      }
    }
    if (!have_dtype) schema(where + ": missing dtype");
    if (!have_shape) schema(where + ": missing shape");
    if (!have_offsets) schema(where + ": missing data_offsets");
    return info;
  }

  const std::string& origin_;
  const char* begin_;
  const char* p_;
  const char* end_;
};

}  // namespace

const char* st_dtype_name(StDType t) {
  switch (t) {
    case StDType::kBF16: return "BF16";
    case StDType::kU8: return "U8";
    case StDType::kI32: return "I32";
    case StDType::kI64: return "I64";
    case StDType::kBool: return "BOOL";
    case StDType::kOther: return "other";
  }
  return "?";
}

int st_dtype_size(StDType t) {
  switch (t) {
    case StDType::kBF16: return 2;
    case StDType::kU8: return 1;
    case StDType::kI32: return 4;
    case StDType::kI64: return 8;
    case StDType::kBool: return 1;
    case StDType::kOther: return 0;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  // A zero dimension wins over any product of the others, which may not fit.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape) {
    const auto m = checked::mul<int64_t>(n, d);
    if (!m || d < 0) throw SafetensorsError("tensor " + quoted(name) + ": element count does not fit in int64");
    n = *m;
  }
  return n;
}

SafetensorsFile SafetensorsFile::load(const std::string& path, uint64_t max_bytes) {
  std::shared_ptr<const FileBytes> bytes;
  try {
    bytes = FileBytes::open(path, max_bytes);
  } catch (const FileError& e) { throw SafetensorsError(e.what()); }
  return from_storage(std::move(bytes), path);
}

SafetensorsFile SafetensorsFile::from_storage(std::shared_ptr<const FileBytes> bytes, std::string origin) {
  SafetensorsFile f;
  f.origin_ = std::move(origin);
  f.storage_ = std::move(bytes);
  f.bytes_ = f.storage_->bytes();
  f.parse();
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(const uint8_t* bytes, size_t size, std::string origin) {
  std::vector<uint8_t> copy;
  if (size > 0) copy.assign(bytes, bytes + size);
  return from_bytes(std::move(copy), std::move(origin));
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<uint8_t> bytes, std::string origin) {
  return from_storage(FileBytes::adopt(std::move(bytes)), std::move(origin));
}

void SafetensorsFile::fail(const std::string& problem) const {
  throw SafetensorsError(printable(origin_, 4096) + ": " + problem);
}

void SafetensorsFile::parse() {
  const uint64_t size = bytes_.size();
  constexpr unsigned char kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (size >= 6 && std::memcmp(bytes_.data(), kNpyMagic, 6) == 0)
    fail("not a safetensors file: it is a .npy file (magic \\x93NUMPY)");
  if (size < 8)
    fail("not a safetensors file: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  if (size == 8 || bytes_[8] != '{') {
    char buf[64];
    if (size == 8)
      std::snprintf(buf, sizeof buf, "the file ends after the 8-byte header length");
    else
      std::snprintf(buf, sizeof buf, "byte 8 is 0x%02x, not the '{' that opens the JSON header", bytes_[8]);
    fail(std::string("not a safetensors file: ") + buf);
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes_[static_cast<size_t>(i)];
  if (n > kMaxHeaderBytes)
    fail("not a safetensors file: header length " + std::to_string(n) + " is over the limit of " +
         std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > size - 8)
    fail("truncated or not a safetensors file: header length " + std::to_string(n) +
         " runs past the end of the file (" + std::to_string(size - 8) + " bytes follow the length)");
  if (n < 2) fail("header length " + std::to_string(n) + " is too short for a JSON object");
  data_start_ = 8 + n;
  parse_header(reinterpret_cast<const char*>(bytes_.data() + 8), reinterpret_cast<const char*>(bytes_.data() + 8 + n));
}

void SafetensorsFile::parse_header(const char* begin, const char* end) {
  const uint64_t data_size = bytes_.size() - data_start_;
  const std::string origin = printable(origin_, 4096);
  Header h = HeaderParser(origin, begin, end).parse();
  metadata_ = std::move(h.metadata);

  for (TensorInfo& info : h.tensors) {
    const std::string where = "tensor " + quoted(info.name);
    int bits = 0;
    if (supported_dtype(info.dtype_name, &info.dtype)) {
      bits = 8 * st_dtype_size(info.dtype);
    } else {
      info.dtype = StDType::kOther;
      bits = other_dtype_bits(info.dtype_name);  // 0: a name the format does not define; sizes unchecked
    }
    if (info.begin > info.end)
      fail(where + ": data_offsets reversed (begin " + std::to_string(info.begin) + " > end " +
           std::to_string(info.end) + ")");
    if (info.end > data_size)
      fail(where + ": data_offsets end " + std::to_string(info.end) + " is beyond the data section (" +
           std::to_string(data_size) + " bytes)");
    // Element count and byte size, overflow-checked. A zero dimension makes the count 0
    // even if a partial product of the others would overflow.
    std::optional<uint64_t> numel = 1;
    for (int64_t d : info.shape) numel = numel ? checked::mul<uint64_t>(*numel, static_cast<uint64_t>(d)) : numel;
    if (std::find(info.shape.begin(), info.shape.end(), 0) != info.shape.end()) numel = 0;
    std::optional<uint64_t> nbits = numel ? checked::mul<uint64_t>(*numel, static_cast<uint64_t>(bits)) : numel;
    if (!numel || *numel > kInt64Max || !nbits)
      fail(where + ": shape " + shape_text(info.shape) + " has too many elements");
    if (bits == 0) continue;  // undefined dtype: listed, never decoded
    if (*nbits % 8 != 0)
      fail(where + ": shape " + shape_text(info.shape) + " of dtype " + printable(info.dtype_name) +
           " does not fill a whole number of bytes");
    const uint64_t nbytes = *nbits / 8;
    if (nbytes != info.end - info.begin)
      fail(where + ": byte size " + std::to_string(info.end - info.begin) + " != prod(shape) * " +
           (bits % 8 == 0 ? std::to_string(bits / 8) : std::to_string(bits) + "/8") + " = " + std::to_string(nbytes) +
           " for shape " + shape_text(info.shape) + " and dtype " + printable(info.dtype_name));
  }

  // The tensors must tile the data section: sorted by offsets, each starts where
  // the previous one ended, and the last ends at the end of the file. This refuses
  // overlapping tensors and bytes that belong to none (a second file hidden inside).
  std::vector<const TensorInfo*> order;
  order.reserve(h.tensors.size());
  for (const TensorInfo& t : h.tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo* t : order) {
    if (t->begin < pos)
      fail("tensor " + quoted(t->name) + ": data_offsets [" + std::to_string(t->begin) + ", " + std::to_string(t->end) +
           "] overlap tensor " + quoted(prev->name) + " [" + std::to_string(prev->begin) + ", " +
           std::to_string(prev->end) + "]");
    if (t->begin > pos)
      fail("data section bytes [" + std::to_string(pos) + ", " + std::to_string(t->begin) +
           ") belong to no tensor (tensors must tile the data section)");
    pos = t->end;
    prev = t;
  }
  if (pos != data_size)
    fail("data section is " + std::to_string(data_size) + " bytes but the tensors end at byte " + std::to_string(pos) +
         " (tensors must tile the data section)");

  for (TensorInfo& t : h.tensors) {
    std::string name = t.name;
    tensors_.emplace(std::move(name), std::move(t));
  }
}

bool SafetensorsFile::has(const std::string& name) const { return tensors_.count(name) != 0; }

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("no tensor named " + quoted(name));
  return it->second;
}

std::vector<std::string> SafetensorsFile::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& kv : tensors_) names.push_back(kv.first);
  return names;
}

std::span<const uint8_t> SafetensorsFile::raw(const std::string& name) const {
  const TensorInfo& t = info(name);
  return bytes_.subspan(static_cast<size_t>(data_start_ + t.begin), static_cast<size_t>(t.end - t.begin));
}

const TensorInfo& SafetensorsFile::typed(const std::string& name, StDType want) const {
  const TensorInfo& t = info(name);
  if (t.dtype != want)
    fail("tensor " + quoted(name) + " has dtype " + printable(t.dtype_name) + ", expected " + st_dtype_name(want));
  return t;
}

namespace {
template <class T>
std::vector<T> copy_out(std::span<const uint8_t> bytes) {
  // Little-endian file, little-endian host (x86-64 / aarch64): a byte copy is the decode.
  static_assert(std::endian::native == std::endian::little, "the reader assumes a little-endian host");
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}
}  // namespace

std::vector<uint16_t> SafetensorsFile::bf16(const std::string& name) const {
  typed(name, StDType::kBF16);
  return copy_out<uint16_t>(raw(name));
}
std::vector<uint8_t> SafetensorsFile::u8(const std::string& name) const {
  typed(name, StDType::kU8);
  return copy_out<uint8_t>(raw(name));
}
std::vector<uint8_t> SafetensorsFile::boolean(const std::string& name) const {
  typed(name, StDType::kBool);
  return copy_out<uint8_t>(raw(name));
}
std::vector<int32_t> SafetensorsFile::i32(const std::string& name) const {
  typed(name, StDType::kI32);
  return copy_out<int32_t>(raw(name));
}
std::vector<int64_t> SafetensorsFile::i64(const std::string& name) const {
  typed(name, StDType::kI64);
  return copy_out<int64_t>(raw(name));
}

int64_t SafetensorsFile::param(const std::string& name) const {
  const TensorInfo& t = typed(name, StDType::kI64);
  if (t.numel() != 1)
    fail("parameter " + quoted(name) + " must have exactly one element, has " + std::to_string(t.numel()));
  int64_t v;
  std::memcpy(&v, raw(name).data(), sizeof v);
  return v;
}

std::string SafetensorsFile::meta(const std::string& key, const std::string& fallback) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? fallback : it->second;
}

std::vector<std::string> SafetensorsFile::case_names() const {
  std::set<std::string> cases;
  for (const auto& kv : tensors_) {
    const std::string& name = kv.first;
    const size_t dot = name.find('.');
    if (dot == std::string::npos || dot <= 4 || name.compare(0, 4, "case") != 0) continue;
    const std::string prefix = name.substr(0, dot);
    if (std::all_of(prefix.begin() + 4, prefix.end(),
                    [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      cases.insert(prefix);
  }
  return {cases.begin(), cases.end()};
}

}  // namespace dsv4kv::conformance
