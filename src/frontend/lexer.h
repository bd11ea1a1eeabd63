// Tokens of the neuron text format. Lexing never fails: bad input becomes Invalid or BadNumber
// tokens that the parser reports with their location.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace spikejit::frontend {

enum class Tok {
  Name, Number, BadNumber, Invalid, Newline, End,
  LParen, RParen, LBracket, RBracket, Comma, Assign,
  Plus, Minus, Star, Slash, Lt, Le, Gt, Ge, Eq, Ne,
};

struct Token {
  Tok kind = Tok::End;
  std::string text;     // the token's source text
  double number = 0.0;  // Number
  int line = 1, col = 1;
};

// Splits `text` into tokens; comments are dropped, each line ends with a Newline token.
std::vector<Token> lex(std::string_view text);

// How a token is named in messages: "'+'", "name 'x'", "end of line".
std::string describe(const Token& t);

}  // namespace spikejit::frontend
