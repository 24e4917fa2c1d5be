package loader

import (
	"fmt"
	"strconv"
	"strings"
)

// parseBound parses pg_get_expr(relpartbound) of strategy ("r", "l", "h"):
// "FOR VALUES FROM (...) TO (...)", "FOR VALUES IN (...)",
// "FOR VALUES WITH (modulus m, remainder r)" or "DEFAULT".
func parseBound(strategy, s string) (bound, error) {
	b := bound{strategy: strategy}
	toks, err := boundTokens(s)
	if err != nil {
		return b, fmt.Errorf("partition bound %q: %w", s, err)
	}
	bad := func(why string) (bound, error) { return b, fmt.Errorf("partition bound %q: %s", s, why) }
	word := func(i int, w string) bool {
		return i < len(toks) && !toks[i].quoted && strings.EqualFold(toks[i].text, w)
	}
	if len(toks) == 1 && word(0, "DEFAULT") {
		b.isDefault = true
		return b, nil
	}
	if !word(0, "FOR") || !word(1, "VALUES") {
		return bad("want FOR VALUES or DEFAULT")
	}
	i := 2
	// list reads "( v, v, ... )" from toks[i].
	list := func() ([]boundValue, error) {
		if i >= len(toks) || toks[i].text != "(" || toks[i].quoted {
			return nil, fmt.Errorf("partition bound %q: want (", s)
		}
		i++
		var out []boundValue
		for {
			if i >= len(toks) {
				return nil, fmt.Errorf("partition bound %q: unterminated list", s)
			}
			t := toks[i]
			i++
			var v boundValue
			switch {
			case t.quoted:
				v.text = t.text
			case strings.EqualFold(t.text, "NULL"):
				v.null = true
			case strings.EqualFold(t.text, "MINVALUE"):
				v.min = true
			case strings.EqualFold(t.text, "MAXVALUE"):
				v.max = true
			case t.text == "(" || t.text == ")" || t.text == ",":
				return nil, fmt.Errorf("partition bound %q: unexpected %q", s, t.text)
			default:
				v.text = t.text // a number or true/false
			}
			out = append(out, v)
			if i >= len(toks) {
				return nil, fmt.Errorf("partition bound %q: unterminated list", s)
			}
			switch toks[i].text {
			case ",":
				i++
			case ")":
				i++
				return out, nil
			default:
				return nil, fmt.Errorf("partition bound %q: unexpected %q", s, toks[i].text)
			}
		}
	}
	switch {
	case strategy == "r" && word(i, "FROM"):
		i++
		if b.from, err = list(); err != nil {
			return b, err
		}
		if !word(i, "TO") {
			return bad("want TO")
		}
		i++
		if b.to, err = list(); err != nil {
			return b, err
		}
	case strategy == "l" && word(i, "IN"):
		i++
		if b.in, err = list(); err != nil {
			return b, err
		}
	case strategy == "h" && word(i, "WITH"):
		i++
		vals, err := list()
		if err != nil {
			return b, err
		}
		// "modulus 4" and "remainder 1" are each one token pair, read as
		// the words of one list element.
		if len(vals) != 2 {
			return bad("want (modulus m, remainder r)")
		}
		for _, v := range vals {
			f := strings.Fields(v.text)
			if len(f) != 2 {
				return bad("want (modulus m, remainder r)")
			}
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				return bad("want (modulus m, remainder r)")
			}
			switch strings.ToLower(f[0]) {
			case "modulus":
				b.modulus = n
			case "remainder":
				b.remainder = n
			default:
				return bad("want (modulus m, remainder r)")
			}
		}
		if b.modulus == 0 || b.remainder >= b.modulus {
			return bad("modulus must be positive and above the remainder")
		}
	default:
		return bad("does not match the partition strategy " + strategy)
	}
	if i != len(toks) {
		return bad("unexpected text after the bound")
	}
	return b, nil
}

type boundToken struct {
	text   string
	quoted bool
}

// boundTokens splits a bound into '(' ')' ',' , quoted literals (with ”
// unescaped) and bare words; the words between two separators are one token
// ("modulus 4").
func boundTokens(s string) ([]boundToken, error) {
	var out []boundToken
	var word []string
	flush := func() {
		if len(word) > 0 {
			out = append(out, boundToken{text: strings.Join(word, " ")})
			word = nil
		}
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '(' || c == ')' || c == ',':
			flush()
			out = append(out, boundToken{text: string(c)})
			i++
		case c == '\'':
			flush()
			var b strings.Builder
			j := i + 1
			for ; j < len(s); j++ {
				if s[j] == '\'' {
					if j+1 < len(s) && s[j+1] == '\'' {
						b.WriteByte('\'')
						j++
						continue
					}
					break
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated literal")
			}
			out = append(out, boundToken{text: b.String(), quoted: true})
			i = j + 1
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" \t\n(),'", rune(s[j])) {
				j++
			}
			// "FOR VALUES FROM": keywords outside parentheses are tokens
			// of their own; inside, "modulus 4" stays one.
			if depth(out) == 0 {
				flush()
				out = append(out, boundToken{text: s[i:j]})
			} else {
				word = append(word, s[i:j])
			}
			i = j
		}
	}
	flush()
	return out, nil
}

// depth is the parenthesis depth after toks.
func depth(toks []boundToken) int {
	d := 0
	for _, t := range toks {
		if t.quoted {
			continue
		}
		switch t.text {
		case "(":
			d++
		case ")":
			d--
		}
	}
	return d
}
