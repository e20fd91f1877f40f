//go:build !cgo

// A build without cgo has no libpg_query: it keeps this text filter, which reads the
// statement as PostgreSQL's scanner does but not its grammar (see parsefilter.go for what
// the parse-tree filter adds: attribute-notation calls, SELECT ... INTO, writes to the
// catalogue).

package sqlcap

import "strings"

// allowedFirst are the statements a handler may run: those that read or write rows. Every
// other command (SET, RESET, BEGIN, COMMIT, COPY, LISTEN, NOTIFY, DO, CALL, PREPARE,
// EXECUTE, CREATE, GRANT, ...) is refused by its first word.
var allowedFirst = map[string]bool{
	"select": true, "insert": true, "update": true, "delete": true,
	"with": true, "values": true, "table": true, "merge": true,
}

// Check refuses a statement the filter does not let through; nil when it may run. It reads
// the text as PostgreSQL's lexer does (comments, quoted identifiers, string constants of
// every kind, dollar quoting) and looks at: the first word, after comments and opening
// parentheses; a semicolon followed by anything but comments; and every name called as a
// function, its quoted form included, outside string constants and comments.
func Check(sql string) *Error {
	if e := nulByte(sql); e != nil {
		return e
	}
	toks, err := lex(sql)
	if err != nil {
		return err
	}
	i := 0
	for i < len(toks) && toks[i].text == "(" && !toks[i].word {
		i++
	}
	if i == len(toks) {
		return refuse("the statement is empty")
	}
	first := toks[i]
	if !first.word || first.quoted || !allowedFirst[strings.ToLower(first.text)] {
		return refuse("%s statements are not allowed: a handler runs only SELECT, INSERT, UPDATE, DELETE, MERGE, "+
			"WITH, VALUES and TABLE (the step's role and its grants decide what they may touch)", describe(first))
	}
	for j, t := range toks {
		switch {
		case !t.word && t.text == ";":
			if j+1 < len(toks) {
				return refuse("one statement per call: the text goes on after a semicolon (send each statement in a call of its own)")
			}
		case !t.word && t.text == "(" && j > 0 && toks[j-1].word && refusedFunc(strings.ToLower(toks[j-1].text)) != "":
			return refuseCall(strings.ToLower(toks[j-1].text))
		}
	}
	return nil
}

func describe(t token) string {
	if !t.word {
		return "statements starting with " + quoteShort(t.text)
	}
	return strings.ToUpper(t.text)
}

func quoteShort(s string) string {
	if len(s) > 20 {
		s = s[:20] + "..."
	}
	return "\"" + s + "\""
}

// token is a word (a keyword or an identifier, quoted or not) or one punctuation byte;
// comments, whitespace, string constants, numbers and parameters are dropped.
type token struct {
	text   string
	word   bool
	quoted bool
}

// lex splits sql the way PostgreSQL's scanner does, as far as the filter needs. It errs on
// the side of refusing: a text it cannot read to the end is refused.
func lex(sql string) ([]token, *Error) {
	var toks []token
	unterminated := func(what string) *Error {
		return Errorf(ErrRefused, "refused", "the statement has an unterminated %s", what)
	}
	n := len(sql)
	for i := 0; i < n; {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < n && sql[i+1] == '-':
			for i < n && sql[i] != '\n' && sql[i] != '\r' {
				i++
			}
		case c == '/' && i+1 < n && sql[i+1] == '*':
			// Comments nest in PostgreSQL.
			depth := 0
			for {
				if i+1 >= n {
					return nil, unterminated("comment")
				}
				if sql[i] == '/' && sql[i+1] == '*' {
					depth++
					i += 2
				} else if sql[i] == '*' && sql[i+1] == '/' {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
		case c == '\'':
			end, ok := skipQuoted(sql, i, '\'', false)
			if !ok {
				return nil, unterminated("string constant")
			}
			i = end
		case c == '"':
			end, ok := skipQuoted(sql, i, '"', false)
			if !ok {
				return nil, unterminated("quoted identifier")
			}
			toks = append(toks, token{text: strings.ReplaceAll(sql[i+1:end-1], `""`, `"`), word: true, quoted: true})
			i = end
		case c == '$' && i+1 < n && isDigit(sql[i+1]):
			i++ // a parameter: $1
			for i < n && isDigit(sql[i]) {
				i++
			}
		case c == '$':
			tagEnd := i + 1
			for tagEnd < n && isIdentCont(sql[tagEnd]) && sql[tagEnd] != '$' {
				tagEnd++
			}
			if tagEnd >= n || sql[tagEnd] != '$' || (tagEnd > i+1 && isDigit(sql[i+1])) {
				toks = append(toks, token{text: "$"})
				i++
				continue
			}
			tag := sql[i : tagEnd+1]
			close := strings.Index(sql[tagEnd+1:], tag)
			if close < 0 {
				return nil, unterminated("dollar-quoted string")
			}
			i = tagEnd + 1 + close + len(tag)
		case isIdentStart(c):
			j := i + 1
			for j < n && isIdentCont(sql[j]) {
				j++
			}
			word := sql[i:j]
			if j < n && sql[j] == '\'' && len(word) == 1 {
				// E'...' (backslash escapes), B'...', X'...', N'...': string constants.
				end, ok := skipQuoted(sql, j, '\'', word == "e" || word == "E")
				if !ok {
					return nil, unterminated("string constant")
				}
				i = end
				continue
			}
			if (word == "u" || word == "U") && j+1 < n && sql[j] == '&' && (sql[j+1] == '\'' || sql[j+1] == '"') {
				if sql[j+1] == '"' {
					// A Unicode-escaped identifier could spell any name: refused outright.
					return nil, Errorf(ErrRefused, "refused", `Unicode-escaped identifiers (U&"...") are not allowed: write the name plainly`)
				}
				end, ok := skipQuoted(sql, j+1, '\'', false)
				if !ok {
					return nil, unterminated("string constant")
				}
				i = end
				continue
			}
			toks = append(toks, token{text: strings.ToLower(word), word: true})
			i = j
		case isDigit(c) || (c == '.' && i+1 < n && isDigit(sql[i+1])):
			// Digits, a point and an exponent; letters after them start a new word, which
			// only ever makes the filter stricter.
			i++
			for i < n && (isDigit(sql[i]) || sql[i] == '.' || sql[i] == '_') {
				i++
			}
		default:
			toks = append(toks, token{text: string(c)})
			i++
		}
	}
	return toks, nil
}

// skipQuoted returns the index after the closing quote of the constant or identifier that
// opens at sql[start]; a doubled quote stands for itself, and with backslashes a backslash
// escapes the next byte (E'...' strings).
func skipQuoted(sql string, start int, q byte, backslashes bool) (int, bool) {
	for i := start + 1; i < len(sql); i++ {
		switch sql[i] {
		case '\\':
			if backslashes {
				i++
			}
		case q:
			if i+1 < len(sql) && sql[i+1] == q {
				i++
				continue
			}
			return i + 1, true
		}
	}
	return 0, false
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isIdentStart and isIdentCont follow PostgreSQL: letters, _, any byte of a multi-byte
// character; then digits and $ too.
func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}

func isIdentCont(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '$' }
