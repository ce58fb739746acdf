package punctual_test

// A reader of the YAML that docs/openapi.yaml is written in (block mappings and sequences,
// flow collections, quoted and plain scalars, | block scalars, comments), for the
// route-coverage test: the module depends on the standard library alone, tests included.

import (
	"fmt"
	"strings"
)

type yamlLine struct {
	indent int
	text   string
}

type yamlParser struct {
	lines []yamlLine
	raw   []string
	i     int
}

func parseYAML(src string) (any, error) {
	p := &yamlParser{}
	for _, l := range strings.Split(src, "\n") {
		p.raw = append(p.raw, l)
		t := strings.TrimLeft(l, " ")
		p.lines = append(p.lines, yamlLine{indent: len(l) - len(t), text: strings.TrimRight(t, " \r")})
	}
	p.skip()
	if p.i >= len(p.lines) {
		return nil, nil
	}
	return p.block(p.lines[p.i].indent)
}

// skip passes blank and comment lines.
func (p *yamlParser) skip() {
	for p.i < len(p.lines) && (p.lines[p.i].text == "" || strings.HasPrefix(p.lines[p.i].text, "#")) {
		p.i++
	}
}

func (p *yamlParser) block(indent int) (any, error) {
	if t := p.lines[p.i].text; t == "-" || strings.HasPrefix(t, "- ") {
		return p.sequence(indent)
	}
	return p.mapping(indent)
}

func (p *yamlParser) sequence(indent int) (any, error) {
	var out []any
	for p.skip(); p.i < len(p.lines); p.skip() {
		l := p.lines[p.i]
		if l.indent != indent || !(l.text == "-" || strings.HasPrefix(l.text, "- ")) {
			break
		}
		rest := strings.TrimSpace(strings.TrimPrefix(l.text, "-"))
		if rest == "" {
			p.i++
			p.skip()
			v, err := p.block(p.lines[p.i].indent)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		if _, _, ok := splitKey(rest); ok && !strings.HasPrefix(rest, "{") && !strings.HasPrefix(rest, "[") {
			// "- key: value" opens a mapping whose keys sit where "key" does.
			p.lines[p.i] = yamlLine{indent: indent + 2, text: rest}
			v, err := p.mapping(indent + 2)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		p.i++
		v, err := scalarOrFlow(rest)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (p *yamlParser) mapping(indent int) (any, error) {
	out := map[string]any{}
	for p.skip(); p.i < len(p.lines); p.skip() {
		l := p.lines[p.i]
		if l.indent != indent || strings.HasPrefix(l.text, "- ") {
			break
		}
		k, v, ok := splitKey(l.text)
		if !ok {
			return nil, fmt.Errorf("line %d: not a key: %q", p.i+1, l.text)
		}
		p.i++
		switch {
		case v == "":
			p.skip()
			if p.i < len(p.lines) && (p.lines[p.i].indent > indent ||
				(p.lines[p.i].indent == indent && strings.HasPrefix(p.lines[p.i].text, "- "))) {
				val, err := p.block(p.lines[p.i].indent)
				if err != nil {
					return nil, err
				}
				out[k] = val
			} else {
				out[k] = nil
			}
		case strings.HasPrefix(v, "|") || strings.HasPrefix(v, ">"):
			var b strings.Builder
			for p.i < len(p.lines) && (p.lines[p.i].text == "" || p.lines[p.i].indent > indent) {
				b.WriteString(strings.TrimSpace(p.raw[p.i]) + "\n")
				p.i++
			}
			out[k] = b.String()
		default:
			// A plain scalar may go on over more-indented lines.
			for p.i < len(p.lines) && p.lines[p.i].text != "" && p.lines[p.i].indent > indent &&
				!strings.HasPrefix(v, "{") && !strings.HasPrefix(v, "[") {
				v += " " + p.lines[p.i].text
				p.i++
			}
			val, err := scalarOrFlow(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", p.i, err)
			}
			out[k] = val
		}
	}
	return out, nil
}

// splitKey splits "key: value" (the key plain or quoted), the value's comment removed.
func splitKey(s string) (string, string, bool) {
	if strings.HasPrefix(s, `"`) || strings.HasPrefix(s, "'") {
		end := strings.IndexByte(s[1:], s[0])
		if end < 0 || !strings.HasPrefix(s[end+2:], ":") {
			return "", "", false
		}
		return s[1 : end+1], stripComment(strings.TrimSpace(s[end+3:])), true
	}
	for i := 0; i < len(s); i++ {
		if s[i] == ':' && (i+1 == len(s) || s[i+1] == ' ') {
			return s[:i], stripComment(strings.TrimSpace(s[i+1:])), true
		}
		if i == 0 && (s[i] == '{' || s[i] == '[') {
			return "", "", false
		}
	}
	return "", "", false
}

func stripComment(s string) string {
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		switch {
		case quote != 0:
			if s[i] == quote {
				quote = 0
			}
		case s[i] == '"' || s[i] == '\'':
			quote = s[i]
		case s[i] == '#' && (i == 0 || s[i-1] == ' '):
			return strings.TrimSpace(s[:i])
		}
	}
	return s
}

// scalarOrFlow reads a value in block context: a plain scalar runs to the end of the line.
func scalarOrFlow(s string) (any, error) {
	if s == "" || strings.ContainsRune("{[\"'", rune(s[0])) {
		return flow(s)
	}
	return s, nil
}

// flow reads a flow value: {…}, […], a quoted or a plain scalar (kept as a string).
func flow(s string) (any, error) {
	f := &flowReader{s: s}
	v, err := f.value()
	if err != nil {
		return nil, err
	}
	if f.skipSpace(); f.i != len(f.s) {
		return nil, fmt.Errorf("trailing %q", f.s[f.i:])
	}
	return v, nil
}

type flowReader struct {
	s string
	i int
}

func (f *flowReader) skipSpace() {
	for f.i < len(f.s) && f.s[f.i] == ' ' {
		f.i++
	}
}

func (f *flowReader) value() (any, error) {
	f.skipSpace()
	if f.i >= len(f.s) {
		return "", nil
	}
	switch c := f.s[f.i]; c {
	case '{':
		f.i++
		m := map[string]any{}
		for {
			f.skipSpace()
			if f.i < len(f.s) && f.s[f.i] == '}' {
				f.i++
				return m, nil
			}
			k, err := f.scalar(":")
			if err != nil {
				return nil, err
			}
			if f.i >= len(f.s) || f.s[f.i] != ':' {
				return nil, fmt.Errorf("no ':' in %q", f.s)
			}
			f.i++
			v, err := f.value()
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = v
			if err := f.next('}'); err != nil {
				return nil, err
			}
		}
	case '[':
		f.i++
		var l []any
		for {
			f.skipSpace()
			if f.i < len(f.s) && f.s[f.i] == ']' {
				f.i++
				return l, nil
			}
			v, err := f.value()
			if err != nil {
				return nil, err
			}
			l = append(l, v)
			if err := f.next(']'); err != nil {
				return nil, err
			}
		}
	default:
		return f.scalar(",]}")
	}
}

// next passes a ',' or stops before the closing bracket.
func (f *flowReader) next(closing byte) error {
	f.skipSpace()
	if f.i < len(f.s) && f.s[f.i] == ',' {
		f.i++
		return nil
	}
	if f.i < len(f.s) && f.s[f.i] == closing {
		return nil
	}
	return fmt.Errorf("expected ',' or %q in %q", closing, f.s)
}

func (f *flowReader) scalar(stops string) (any, error) {
	f.skipSpace()
	if f.i < len(f.s) && (f.s[f.i] == '"' || f.s[f.i] == '\'') {
		q := f.s[f.i]
		var b strings.Builder
		for f.i++; f.i < len(f.s); f.i++ {
			c := f.s[f.i]
			if c == '\\' && q == '"' && f.i+1 < len(f.s) {
				f.i++
				b.WriteByte(f.s[f.i])
				continue
			}
			if c == q {
				f.i++
				return b.String(), nil
			}
			b.WriteByte(c)
		}
		return nil, fmt.Errorf("unterminated string in %q", f.s)
	}
	start := f.i
	for f.i < len(f.s) && !strings.ContainsRune(stops, rune(f.s[f.i])) {
		if f.s[f.i] == ':' && strings.Contains(stops, ":") {
			break
		}
		f.i++
	}
	return strings.TrimSpace(f.s[start:f.i]), nil
}
