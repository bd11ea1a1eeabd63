// First pass of the parser: recursive descent over the tokens of each line.
#include <algorithm>
#include <string>
#include <utility>

#include "frontend/lexer.h"
#include "frontend/syntax.h"
#include "ir/checks.h"

namespace spikejit::frontend {
namespace {

using ir::Op;

Loc loc_of(const Token& t) { return {t.line, t.col}; }

// Thrown to abandon the current line; the diagnostic is already recorded.
struct SyntaxError {};

class Reader {
 public:
  Reader(std::string_view text, Diagnostics& diagnostics) : tokens_(lex(text)), diagnostics_(diagnostics) {}

  Syntax run() {
    read_statements();
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(const Token& t, std::string message) {
    diagnostics_.error(loc_of(t), std::move(message));
    throw SyntaxError{};
  }

  const Token& peek(int ahead = 0) const {
    size_t i = std::min(pos_ + ahead, tokens_.size() - 1);
    return tokens_[i];
  }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool at(Tok kind) const { return peek().kind == kind; }
  bool at_keyword(const char* word) const { return at(Tok::Name) && peek().text == word; }
  bool at_line_end() const { return at(Tok::Newline) || at(Tok::End); }

  const Token& expect(Tok kind, const char* what) {
    if (!at(kind)) unexpected(what);
    return next();
  }

  [[noreturn]] void unexpected(const std::string& expected) {
    const Token& t = peek();
    if (t.kind == Tok::BadNumber) fail(t, "bad number '" + t.text + "'");
    if (t.kind == Tok::Invalid) fail(t, "unexpected character " + describe(t));
    fail(t, "expected " + expected + ", got " + describe(t));
  }

  std::string expect_name(const char* what) {
    if (at(Tok::Name) && ir::is_keyword(peek().text))
      fail(peek(), "'" + peek().text + "' is a keyword and cannot be used as " + what);
    return expect(Tok::Name, what).text;
  }

  void read_statements() {
    bool seen_neuron = false, seen_statement = false;
    while (!at(Tok::End)) {
      if (at(Tok::Newline)) {
        next();
        continue;
      }
      try {
        const Token& first = peek();
        if (at_keyword("neuron")) {
          next();
          // A misplaced first line was reported where the first statement is.
          if (seen_neuron) fail(first, "a file holds one neuron; 'neuron' appears again");
          out_.neuron_loc = loc_of(first);
          out_.name = expect_name("the neuron's name");
          seen_neuron = true;
        } else {
          if (!seen_neuron && !seen_statement)
            diagnostics_.error(loc_of(first), "expected 'neuron NAME' as the first line");
          statement();
        }
        seen_statement = true;
        if (!at_line_end()) unexpected("end of line");
      } catch (const SyntaxError&) {
        while (!at_line_end()) next();
      }
    }
    if (!seen_neuron && !seen_statement) {
      diagnostics_.error({1, 1}, "empty input: expected 'neuron NAME'");
      diagnostics_.throw_all();
    }
    if (!seen_neuron) out_.name = "unnamed";  // already reported; keeps the name check quiet
  }

  void statement() {
    if (at_keyword("input")) return declarations(Decl::Kind::Input);
    if (at_keyword("state")) return declarations(Decl::Kind::State);
    if (at_keyword("const")) return declarations(Decl::Kind::Const);
    if (at_keyword("param")) return declarations(Decl::Kind::Param);
    if (at_keyword("output")) return declarations(Decl::Kind::Output);
    if (at(Tok::Name) && !ir::is_keyword(peek().text) && peek(1).kind == Tok::Assign) {
      // Recorded before its expression: a line with a syntax error still binds its name.
      Statement s;
      s.loc = loc_of(peek());
      s.name = next().text;
      out_.statements.push_back(std::move(s));
      next();  // '='
      depth_ = 0;
      out_.statements.back().expr = expression();
      return;
    }
    unexpected("a declaration (input, state, const, param, output) or an assignment 'name = expression'");
  }

  // KEYWORD item (, item)*
  void declarations(Decl::Kind kind) {
    next();
    do {
      Decl d;
      d.kind = kind;
      d.loc = loc_of(peek());
      d.name = expect_name("a name");
      if (kind == Decl::Kind::Param && at(Tok::LBracket)) {
        next();
        if (!at_keyword("neuron")) unexpected("'neuron' (a per-neuron param is written w[neuron])");
        next();
        expect(Tok::RBracket, "']'");
        d.per_neuron = true;
      }
      if (kind == Decl::Kind::Input || kind == Decl::Kind::Output) {
        // no value
      } else if (at(Tok::Assign)) {
        next();
        declared_value(d);
      } else if (kind == Decl::Kind::Const) {
        unexpected("'=' and the constant's value");
      }
      out_.decls.push_back(std::move(d));
      if (!at(Tok::Comma)) break;
      next();
    } while (true);
  }

  void declared_value(Decl& d) {
    if (d.kind == Decl::Kind::Const && (at_keyword("true") || at_keyword("false"))) {
      d.is_bool = true;
      d.value = next().text == "true" ? 1.0 : 0.0;
      return;
    }
    if (d.kind == Decl::Kind::State && at(Tok::Name)) {
      d.init_loc = loc_of(peek());
      d.init_name = expect_name("a constant's name");
      return;
    }
    d.value = signed_number(d.kind == Decl::Kind::State ? "a number or a constant's name"
                            : d.kind == Decl::Kind::Const ? "a number, true or false"
                                                          : "a number");
  }

  double signed_number(const char* what) {
    bool negative = false;
    if (at(Tok::Minus)) {
      next();
      negative = true;
    }
    if (!at(Tok::Number)) unexpected(what);
    double v = next().number;
    return negative ? -v : v;
  }

  // ---- expressions: or < and < not < comparison < + - < * / < unary - < call/primary --------

  ExprPtr make(Expr::Kind kind, Loc loc) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->loc = loc;
    return e;
  }

  ExprPtr binary(Op op, Loc loc, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::Binary, loc);
    e->op = op;
    e->depth = 1 + std::max(a->depth, b->depth);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    check_depth(*e);
    return e;
  }

  void check_depth(const Expr& e) {
    if (e.depth > ir::kMaxExpressionDepth)
      fail(tokens_[pos_ > 0 ? pos_ - 1 : 0], "expression nested too deeply (more than " +
                                                 std::to_string(ir::kMaxExpressionDepth) + " levels)");
  }

  // Guards the recursion of the descent (parentheses, arguments, prefix operators).
  struct Nest {
    Reader& p;
    explicit Nest(Reader& reader) : p(reader) {
      if (++p.depth_ > ir::kMaxExpressionDepth)
        p.fail(p.peek(), "expression nested too deeply (more than " +
                             std::to_string(ir::kMaxExpressionDepth) + " levels)");
    }
    ~Nest() { --p.depth_; }
  };

  ExprPtr expression() {
    Nest nest(*this);
    ExprPtr e = and_expr();
    while (at_keyword("or")) {
      Loc loc = loc_of(next());
      e = binary(Op::Or, loc, std::move(e), and_expr());
    }
    return e;
  }

  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (at_keyword("and")) {
      Loc loc = loc_of(next());
      e = binary(Op::And, loc, std::move(e), not_expr());
    }
    return e;
  }

  ExprPtr not_expr() {
    if (!at_keyword("not")) return comparison();
    Nest nest(*this);
    auto e = make(Expr::Kind::Unary, loc_of(next()));
    e->op = Op::Not;
    e->args.push_back(not_expr());
    e->depth = 1 + e->args[0]->depth;
    check_depth(*e);
    return e;
  }

  static bool comparison_op(Tok t, Op* op) {
    switch (t) {
      case Tok::Lt: *op = Op::Lt; return true;
      case Tok::Le: *op = Op::Le; return true;
      case Tok::Gt: *op = Op::Gt; return true;
      case Tok::Ge: *op = Op::Ge; return true;
      case Tok::Eq: *op = Op::Eq; return true;
      case Tok::Ne: *op = Op::Ne; return true;
      default: return false;
    }
  }

  ExprPtr comparison() {
    ExprPtr e = sum();
    Op op;
    if (!comparison_op(peek().kind, &op)) return e;
    Loc loc = loc_of(next());
    e = binary(op, loc, std::move(e), sum());
    if (comparison_op(peek().kind, &op))
      fail(peek(), "comparisons cannot be chained; combine them with 'and'");
    return e;
  }

  ExprPtr sum() {
    ExprPtr e = product();
    while (at(Tok::Plus) || at(Tok::Minus)) {
      Op op = at(Tok::Plus) ? Op::Add : Op::Sub;
      Loc loc = loc_of(next());
      e = binary(op, loc, std::move(e), product());
    }
    return e;
  }

  ExprPtr product() {
    ExprPtr e = unary();
    while (at(Tok::Star) || at(Tok::Slash)) {
      Op op = at(Tok::Star) ? Op::Mul : Op::Div;
      Loc loc = loc_of(next());
      e = binary(op, loc, std::move(e), unary());
    }
    return e;
  }

  ExprPtr unary() {
    if (!at(Tok::Minus)) return primary();
    Loc loc = loc_of(next());
    if (at(Tok::Number)) {  // a negative literal is one number, so `-2` prints back as `-2`
      auto e = make(Expr::Kind::Number, loc);
      e->value = -next().number;
      return e;
    }
    Nest nest(*this);
    auto e = make(Expr::Kind::Unary, loc);
    e->op = Op::Neg;
    e->args.push_back(unary());
    e->depth = 1 + e->args[0]->depth;
    check_depth(*e);
    return e;
  }

  ExprPtr primary() {
    const Token& t = peek();
    if (t.kind == Tok::Number) {
      auto e = make(Expr::Kind::Number, loc_of(t));
      e->value = next().number;
      return e;
    }
    if (t.kind == Tok::LParen) {
      next();
      ExprPtr e = expression();
      expect(Tok::RParen, "')'");
      return e;
    }
    if (t.kind == Tok::Name && (t.text == "true" || t.text == "false")) {
      auto e = make(Expr::Kind::Bool, loc_of(t));
      e->value = next().text == "true" ? 1.0 : 0.0;
      return e;
    }
    if (t.kind == Tok::Name && !ir::is_keyword(t.text)) {
      Loc loc = loc_of(t);
      std::string name = next().text;
      if (!at(Tok::LParen)) {
        auto e = make(Expr::Kind::Name, loc);
        e->name = std::move(name);
        return e;
      }
      return call(std::move(name), loc);
    }
    if (t.kind == Tok::Name) fail(t, "expected an expression, got keyword '" + t.text + "'");
    unexpected("an expression");
  }

  ExprPtr call(std::string name, Loc loc) {
    auto e = make(Expr::Kind::Call, loc);
    e->name = std::move(name);
    next();  // '('
    if (!at(Tok::RParen)) {
      do {
        if (e->name == "spike" && e->args.size() == 1) {
          surrogate(*e);
        } else {
          e->args.push_back(expression());
          e->depth = std::max(e->depth, 1 + e->args.back()->depth);
        }
        if (!at(Tok::Comma)) break;
        next();
      } while (true);
    }
    expect(Tok::RParen, "',' or ')'");
    check_depth(*e);
    return e;
  }

  // NAME [ '(' [NAME '=' number (',' NAME '=' number)*] ')' ]
  void surrogate(Expr& e) {
    if (e.has_surrogate) fail(peek(), "spike takes a value and a surrogate");
    e.has_surrogate = true;
    e.surrogate_loc = loc_of(peek());
    if (!at(Tok::Name)) unexpected("a surrogate such as sigmoid(alpha=4)");
    e.surrogate = next().text;
    if (!at(Tok::LParen)) return;
    next();
    if (!at(Tok::RParen)) {
      do {
        SurrogateArg a;
        a.loc = loc_of(peek());
        if (!(at(Tok::Name) && peek(1).kind == Tok::Assign))
          unexpected("a surrogate parameter written name = number");
        a.name = next().text;
        next();  // '='
        a.value = signed_number("a number");
        e.surrogate_args.push_back(std::move(a));
        if (!at(Tok::Comma)) break;
        next();
      } while (true);
    }
    expect(Tok::RParen, "',' or ')'");
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;  // recursion of the expression descent
  Diagnostics& diagnostics_;
  Syntax out_;
};

}  // namespace

Diagnostics::Diagnostics(std::string_view text, std::string_view file) : file_(file) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines_.push_back(std::move(line));
    start = end + 1;
  }
}

void Diagnostics::error(Loc loc, std::string message) {
  Diagnostic d;
  d.file = file_;
  d.line = loc.line;
  d.column = loc.col;
  d.message = std::move(message);
  if (loc.line >= 1 && loc.line <= static_cast<int>(lines_.size())) d.source_line = lines_[loc.line - 1];
  list_.push_back(std::move(d));
}

void Diagnostics::throw_all() {
  auto key = [](const Diagnostic& d) { return std::make_pair(d.line == 0 ? 1 << 30 : d.line, d.column); };
  std::stable_sort(list_.begin(), list_.end(),
                   [&](const Diagnostic& a, const Diagnostic& b) { return key(a) < key(b); });
  throw ParseError(std::move(list_));
}

Syntax read_syntax(std::string_view text, Diagnostics& diagnostics) { return Reader(text, diagnostics).run(); }

}  // namespace spikejit::frontend
