#include "frontend/lexer.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace spikejit::frontend {
namespace {

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string_view text) : s_(text) {
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") i_ = line_start_ = 3;  // a UTF-8 byte order mark (editors write one)
  }

  std::vector<Token> run() {
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (c == '\n') {
        push(Tok::Newline, 1);
        ++line_;
        line_start_ = i_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (is_letter(c)) {
        size_t n = 0;
        while (i_ + n < s_.size() && (is_letter(s_[i_ + n]) || is_digit(s_[i_ + n]))) ++n;
        push(Tok::Name, n);
      } else if (is_digit(c) || (c == '.' && i_ + 1 < s_.size() && is_digit(s_[i_ + 1]))) {
        number();
      } else {
        punctuation(c);
      }
    }
    Token end;
    end.kind = Tok::End;
    end.line = line_;
    end.col = static_cast<int>(i_ - line_start_) + 1;
    out_.push_back(end);
    return std::move(out_);
  }

 private:
  void push(Tok kind, size_t n) {
    Token t;
    t.kind = kind;
    t.text = std::string(s_.substr(i_, n));
    t.line = line_;
    t.col = static_cast<int>(i_ - line_start_) + 1;
    out_.push_back(std::move(t));
    i_ += n;
  }

  // digits [. digits] [e [+-] digits]; letters or dots glued to it make a BadNumber.
  void number() {
    size_t n = 0;
    bool ok = true;
    auto more = [&](auto pred) { return i_ + n < s_.size() && pred(s_[i_ + n]); };
    auto digits = [&] { while (more(is_digit)) ++n; };
    digits();
    if (more([](char c) { return c == '.'; })) {
      ++n;
      digits();
    }
    if (more([](char c) { return c == 'e' || c == 'E'; })) {
      ++n;
      if (more([](char c) { return c == '+' || c == '-'; })) ++n;
      size_t before = n;
      digits();
      ok = n > before;
    }
    while (more([](char c) { return is_letter(c) || is_digit(c) || c == '.'; })) {
      ++n;
      ok = false;
    }
    std::string_view text = s_.substr(i_, n);
    double value = 0.0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    ok = ok && ec == std::errc() && end == text.data() + text.size() && std::isfinite(value);
    push(ok ? Tok::Number : Tok::BadNumber, n);
    out_.back().number = value;
  }

  void punctuation(char c) {
    char d = i_ + 1 < s_.size() ? s_[i_ + 1] : '\0';
    switch (c) {
      case '(': return push(Tok::LParen, 1);
      case ')': return push(Tok::RParen, 1);
      case '[': return push(Tok::LBracket, 1);
      case ']': return push(Tok::RBracket, 1);
      case ',': return push(Tok::Comma, 1);
      case '+': return push(Tok::Plus, 1);
      case '-': return push(Tok::Minus, 1);
      case '*': return push(Tok::Star, 1);
      case '/': return push(Tok::Slash, 1);
      case '<': return d == '=' ? push(Tok::Le, 2) : push(Tok::Lt, 1);
      case '>': return d == '=' ? push(Tok::Ge, 2) : push(Tok::Gt, 1);
      case '=': return d == '=' ? push(Tok::Eq, 2) : push(Tok::Assign, 1);
      case '!': return d == '=' ? push(Tok::Ne, 2) : push(Tok::Invalid, 1);
      default: {
        // Keep a multi-byte UTF-8 character whole so messages show it intact.
        size_t n = 1;
        if (static_cast<unsigned char>(c) >= 0xC0)
          while (i_ + n < s_.size() && (static_cast<unsigned char>(s_[i_ + n]) & 0xC0) == 0x80 && n < 4) ++n;
        return push(Tok::Invalid, n);
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0, line_start_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(std::string_view text) { return Lexer(text).run(); }

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::Name: return "name '" + t.text + "'";
    case Tok::Number: return "number " + t.text;
    case Tok::Newline: return "end of line";
    case Tok::End: return "end of input";
    default: {
      // Control bytes (NUL, ESC, ...) spelled out: never written raw to a terminal.
      std::string shown;
      for (const char c : t.text) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20 || byte == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\x%02x", byte);
          shown += escaped;
        } else {
          shown += c;
        }
      }
      return "'" + shown + "'";
    }
  }
}

}  // namespace spikejit::frontend
