package plans

import (
	"errors"
	"strings"
)

// oneStatement returns body without its closing semicolon (and what follows it: blanks and
// comments) when body is exactly one SQL statement, and an error otherwise. It knows
// PostgreSQL's lexical rules that can hide a semicolon: comments (-- and nested /* */),
// string literals (a doubled quote, and in E-strings a backslash, escapes), quoted names and
// dollar quotes.
func oneStatement(body string) (string, error) {
	end := -1 // the first top-level semicolon
	for i := 0; i < len(body); {
		c := body[i]
		switch {
		case c == '-' && strings.HasPrefix(body[i:], "--"):
			j := strings.IndexByte(body[i:], '\n')
			if j < 0 {
				i = len(body)
			} else {
				i += j + 1
			}
			continue
		case c == '/' && strings.HasPrefix(body[i:], "/*"):
			j, ok := blockCommentEnd(body, i)
			if !ok {
				return "", errors.New("its body has an unterminated comment")
			}
			i = j
			continue
		case end >= 0:
			if !isSpace(c) {
				return "", errors.New("its body is more than one statement")
			}
		case c == '\'':
			escapes := i > 0 && (body[i-1] == 'E' || body[i-1] == 'e') && (i < 2 || !isIdentChar(body[i-2]))
			j, ok := quotedEnd(body, i, '\'', escapes)
			if !ok {
				return "", errors.New("its body has an unterminated string")
			}
			i = j
			continue
		case c == '"':
			j, ok := quotedEnd(body, i, '"', false)
			if !ok {
				return "", errors.New("its body has an unterminated quoted name")
			}
			i = j
			continue
		case c == '$' && (i == 0 || !isIdentChar(body[i-1])):
			if tag, ok := dollarTag(body[i:]); ok {
				j := strings.Index(body[i+len(tag):], tag)
				if j < 0 {
					return "", errors.New("its body has an unterminated dollar quote")
				}
				i += len(tag) + j + len(tag)
				continue
			}
		case c == ';':
			end = i
		}
		i++
	}
	if end >= 0 {
		body = body[:end]
	}
	if strings.TrimSpace(body) == "" {
		return "", errors.New("its body is empty")
	}
	return body, nil
}

// blockCommentEnd is the index after the /* */ comment (nested, as PostgreSQL's) at i.
func blockCommentEnd(s string, i int) (int, bool) {
	depth := 0
	for i < len(s) {
		switch {
		case strings.HasPrefix(s[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(s[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i, true
			}
		default:
			i++
		}
	}
	return i, false
}

// quotedEnd is the index after the literal or name opened by q at i: a doubled q stands for
// itself, and with escapes a backslash escapes the next byte.
func quotedEnd(s string, i int, q byte, escapes bool) (int, bool) {
	for i++; i < len(s); i++ {
		switch {
		case escapes && s[i] == '\\':
			i++
		case s[i] == q && i+1 < len(s) && s[i+1] == q:
			i++
		case s[i] == q:
			return i + 1, true
		}
	}
	return i, false
}

// dollarTag is the $tag$ (or $$) that s begins with, if it begins with one.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1], true
		case isIdentChar(c) && !(j == 1 && c >= '0' && c <= '9'):
		default:
			return "", false // $1 is a parameter, not a quote
		}
	}
	return "", false
}

func isIdentChar(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
