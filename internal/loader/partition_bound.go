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
	p := &boundParser{s: s, toks: toks}
	if len(toks) == 1 && p.word(0, "DEFAULT") {
		b.isDefault = true
		return b, nil
	}
	if !p.word(0, "FOR") || !p.word(1, "VALUES") {
		return b, p.bad("want FOR VALUES or DEFAULT")
	}
	p.i = 2
	switch {
	case strategy == "r" && p.word(p.i, "FROM"):
		p.i++
		if b.from, err = p.list(); err != nil {
			return b, err
		}
		if !p.word(p.i, "TO") {
			return b, p.bad("want TO")
		}
		p.i++
		if b.to, err = p.list(); err != nil {
			return b, err
		}
	case strategy == "l" && p.word(p.i, "IN"):
		p.i++
		if b.in, err = p.list(); err != nil {
			return b, err
		}
	case strategy == "h" && p.word(p.i, "WITH"):
		p.i++
		if b.modulus, b.remainder, err = p.hash(); err != nil {
			return b, err
		}
	default:
		return b, p.bad("does not match the partition strategy " + strategy)
	}
	if p.i != len(toks) {
		return b, p.bad("unexpected text after the bound")
	}
	return b, nil
}

// boundParser reads the tokens of the bound s from toks[i].
type boundParser struct {
	s    string
	toks []boundToken
	i    int
}

// bad is an error saying why the bound is refused.
func (p *boundParser) bad(why string) error { return fmt.Errorf("partition bound %q: %s", p.s, why) }

// word says whether toks[i] is the keyword w.
func (p *boundParser) word(i int, w string) bool {
	return i < len(p.toks) && !p.toks[i].quoted && strings.EqualFold(p.toks[i].text, w)
}

// list reads "( v, v, ... )".
func (p *boundParser) list() ([]boundValue, error) {
	if p.i >= len(p.toks) || p.toks[p.i].text != "(" || p.toks[p.i].quoted {
		return nil, p.bad("want (")
	}
	p.i++
	var out []boundValue
	for {
		if p.i >= len(p.toks) {
			return nil, p.bad("unterminated list")
		}
		v, err := p.value(p.toks[p.i])
		if err != nil {
			return nil, err
		}
		p.i++
		out = append(out, v)
		if p.i >= len(p.toks) {
			return nil, p.bad("unterminated list")
		}
		switch p.toks[p.i].text {
		case ",":
			p.i++
		case ")":
			p.i++
			return out, nil
		default:
			return nil, p.bad(fmt.Sprintf("unexpected %q", p.toks[p.i].text))
		}
	}
}

// value is one element of a list.
func (p *boundParser) value(t boundToken) (boundValue, error) {
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
		return v, p.bad(fmt.Sprintf("unexpected %q", t.text))
	default:
		v.text = t.text // a number or true/false
	}
	return v, nil
}

// hash reads "(modulus m, remainder r)". "modulus 4" and "remainder 1" are
// each one token pair, read as the words of one list element.
func (p *boundParser) hash() (modulus, remainder uint64, err error) {
	vals, err := p.list()
	if err != nil {
		return 0, 0, err
	}
	want := p.bad("want (modulus m, remainder r)")
	if len(vals) != 2 {
		return 0, 0, want
	}
	for _, v := range vals {
		f := strings.Fields(v.text)
		if len(f) != 2 {
			return 0, 0, want
		}
		n, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return 0, 0, want
		}
		switch strings.ToLower(f[0]) {
		case "modulus":
			modulus = n
		case "remainder":
			remainder = n
		default:
			return 0, 0, want
		}
	}
	if modulus == 0 || remainder >= modulus {
		return 0, 0, p.bad("modulus must be positive and above the remainder")
	}
	return modulus, remainder, nil
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
