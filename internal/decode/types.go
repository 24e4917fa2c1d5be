package decode

import "strconv"

// modFormat says how format_type prints a type's modifier (atttypmod).
type modFormat uint8

const (
	// modGeneric: a type without a typmodout function; a modifier >= 0 is
	// printed as "(n)" (it does not occur for these types in practice).
	modGeneric modFormat = iota
	// modIgnored: format_type special-cases the type and never prints a
	// modifier (boolean, the integers, real, double precision).
	modIgnored
	modChar     // bpchar: "character(n)", and "bpchar" without modifier
	modVarchar  // "character varying(n)"
	modNumeric  // "numeric(p,s)"
	modTime     // time, timetz, timestamp, timestamptz: "timestamp(p) with time zone"
	modInterval // "interval day to second(p)"
	modBit      // "bit(n)", and "\"bit\"" without modifier
	modVarbit   // "bit varying(n)"
)

// builtinType is one row of the built-in type table.
type builtinType struct {
	oid, array uint32
	typname    string // pg_type.typname, as Type messages of domains name it
	name       string // format_type(oid, -1)
	mod        modFormat
}

// builtinTypes are the pg_catalog types that can be column types, with their
// array types. Built-in OIDs are fixed in PostgreSQL's catalog data and do not
// change between versions; the names were taken from PostgreSQL 15 and are
// checked against its format_type output by testdata/format_type.golden.
var builtinTypes = [...]builtinType{
	{16, 1000, "bool", "boolean", modIgnored},
	{17, 1001, "bytea", "bytea", modGeneric},
	{18, 1002, "char", `"char"`, modGeneric},
	{19, 1003, "name", "name", modGeneric},
	{20, 1016, "int8", "bigint", modIgnored},
	{21, 1005, "int2", "smallint", modIgnored},
	{23, 1007, "int4", "integer", modIgnored},
	{24, 1008, "regproc", "regproc", modGeneric},
	{25, 1009, "text", "text", modGeneric},
	{26, 1028, "oid", "oid", modGeneric},
	{28, 1011, "xid", "xid", modGeneric},
	{114, 199, "json", "json", modGeneric},
	{142, 143, "xml", "xml", modGeneric},
	{600, 1017, "point", "point", modGeneric},
	{601, 1018, "lseg", "lseg", modGeneric},
	{602, 1019, "path", "path", modGeneric},
	{603, 1020, "box", "box", modGeneric},
	{604, 1027, "polygon", "polygon", modGeneric},
	{628, 629, "line", "line", modGeneric},
	{650, 651, "cidr", "cidr", modGeneric},
	{700, 1021, "float4", "real", modIgnored},
	{701, 1022, "float8", "double precision", modIgnored},
	{718, 719, "circle", "circle", modGeneric},
	{774, 775, "macaddr8", "macaddr8", modGeneric},
	{790, 791, "money", "money", modGeneric},
	{829, 1040, "macaddr", "macaddr", modGeneric},
	{869, 1041, "inet", "inet", modGeneric},
	{1042, 1014, "bpchar", "bpchar", modChar},
	{1043, 1015, "varchar", "character varying", modVarchar},
	{1082, 1182, "date", "date", modGeneric},
	{1083, 1183, "time", "time without time zone", modTime},
	{1114, 1115, "timestamp", "timestamp without time zone", modTime},
	{1184, 1185, "timestamptz", "timestamp with time zone", modTime},
	{1186, 1187, "interval", "interval", modInterval},
	{1266, 1270, "timetz", "time with time zone", modTime},
	{1560, 1561, "bit", `"bit"`, modBit},
	{1562, 1563, "varbit", "bit varying", modVarbit},
	{1700, 1231, "numeric", "numeric", modNumeric},
	{2202, 2207, "regprocedure", "regprocedure", modGeneric},
	{2203, 2208, "regoper", "regoper", modGeneric},
	{2204, 2209, "regoperator", "regoperator", modGeneric},
	{2205, 2210, "regclass", "regclass", modGeneric},
	{2206, 2211, "regtype", "regtype", modGeneric},
	{2950, 2951, "uuid", "uuid", modGeneric},
	{3220, 3221, "pg_lsn", "pg_lsn", modGeneric},
	{3614, 3643, "tsvector", "tsvector", modGeneric},
	{3615, 3645, "tsquery", "tsquery", modGeneric},
	{3734, 3735, "regconfig", "regconfig", modGeneric},
	{3769, 3770, "regdictionary", "regdictionary", modGeneric},
	{3802, 3807, "jsonb", "jsonb", modGeneric},
	{3904, 3905, "int4range", "int4range", modGeneric},
	{3906, 3907, "numrange", "numrange", modGeneric},
	{3908, 3909, "tsrange", "tsrange", modGeneric},
	{3910, 3911, "tstzrange", "tstzrange", modGeneric},
	{3912, 3913, "daterange", "daterange", modGeneric},
	{3926, 3927, "int8range", "int8range", modGeneric},
	{4072, 4073, "jsonpath", "jsonpath", modGeneric},
	{4089, 4090, "regnamespace", "regnamespace", modGeneric},
	{4096, 4097, "regrole", "regrole", modGeneric},
	{4191, 4192, "regcollation", "regcollation", modGeneric},
	{4451, 6150, "int4multirange", "int4multirange", modGeneric},
	{4532, 6151, "nummultirange", "nummultirange", modGeneric},
	{4533, 6152, "tsmultirange", "tsmultirange", modGeneric},
	{4534, 6153, "tstzmultirange", "tstzmultirange", modGeneric},
	{4535, 6155, "datemultirange", "datemultirange", modGeneric},
	{4536, 6157, "int8multirange", "int8multirange", modGeneric},
	{5069, 271, "xid8", "xid8", modGeneric},
}

var (
	builtinByOID     = map[uint32]*builtinType{}
	builtinByArray   = map[uint32]*builtinType{}
	builtinByTypname = map[string]*builtinType{}
)

func init() {
	for i := range builtinTypes {
		t := &builtinTypes[i]
		builtinByOID[t.oid] = t
		builtinByArray[t.array] = t
		builtinByTypname[t.typname] = t
	}
}

// TypeName returns what PostgreSQL's format_type(oid, typmod) prints for a
// built-in type or an array of one: "bigint", "numeric(12,2)", "character
// varying(40)", "timestamp with time zone", "text[]". typmod is atttypmod
// (-1 for none). ok is false for other OIDs (user types, extension types,
// internal catalog types) and for modifiers PostgreSQL itself rejects.
func TypeName(oid uint32, typmod int32) (name string, ok bool) {
	if t := builtinByOID[oid]; t != nil {
		return t.format(typmod)
	}
	if t := builtinByArray[oid]; t != nil {
		// format_type prints an array as its element type, with the
		// column's modifier, followed by "[]".
		if name, ok = t.format(typmod); ok {
			return name + "[]", true
		}
	}
	return "", false
}

// format mirrors format_type_extended with FORMAT_TYPE_TYPEMOD_GIVEN and
// the type's typmodout function.
func (t *builtinType) format(typmod int32) (string, bool) {
	if typmod < 0 || t.mod == modIgnored {
		return t.name, true
	}
	n := strconv.Itoa(int(typmod))
	switch t.mod {
	case modChar, modVarchar:
		base := "character"
		if t.mod == modVarchar {
			base = "character varying"
		}
		// {bp,var}chartypmodout: the length is typmod - VARHDRSZ.
		if typmod > 4 {
			return base + "(" + strconv.Itoa(int(typmod-4)) + ")", true
		}
		return base, true
	case modNumeric:
		// numerictypmodout: precision in the high 16 bits of typmod -
		// VARHDRSZ, scale as a signed 11-bit field (negative since PG 15).
		if typmod < 4 {
			return "numeric", true
		}
		v := typmod - 4
		prec := (v >> 16) & 0xffff
		scale := ((v & 0x7ff) ^ 1024) - 1024
		return "numeric(" + strconv.Itoa(int(prec)) + "," + strconv.Itoa(int(scale)) + ")", true
	case modTime:
		// "timestamp with time zone" becomes "timestamp(3) with time zone".
		base := "time"
		if t.typname == "timestamp" || t.typname == "timestamptz" {
			base = "timestamp"
		}
		return base + "(" + n + ")" + t.name[len(base):], true
	case modInterval:
		return intervalName(typmod)
	case modBit:
		return "bit(" + n + ")", true
	case modVarbit:
		return "bit varying(" + n + ")", true
	}
	return t.name + "(" + n + ")", true
}

// Interval range bits (PostgreSQL datetime.h: 1 << MONTH, YEAR, DAY, HOUR,
// MINUTE, SECOND).
const (
	ivMonth  = 1 << 1
	ivYear   = 1 << 2
	ivDay    = 1 << 3
	ivHour   = 1 << 10
	ivMinute = 1 << 11
	ivSecond = 1 << 12
	ivFull   = 0x7fff
)

// intervalName mirrors intervaltypmodout: the field range in the high 16
// bits, the seconds precision in the low 16 (0xffff for none).
func intervalName(typmod int32) (string, bool) {
	var fields string
	switch (typmod >> 16) & 0x7fff {
	case ivYear:
		fields = " year"
	case ivMonth:
		fields = " month"
	case ivDay:
		fields = " day"
	case ivHour:
		fields = " hour"
	case ivMinute:
		fields = " minute"
	case ivSecond:
		fields = " second"
	case ivYear | ivMonth:
		fields = " year to month"
	case ivDay | ivHour:
		fields = " day to hour"
	case ivDay | ivHour | ivMinute:
		fields = " day to minute"
	case ivDay | ivHour | ivMinute | ivSecond:
		fields = " day to second"
	case ivHour | ivMinute:
		fields = " hour to minute"
	case ivHour | ivMinute | ivSecond:
		fields = " hour to second"
	case ivMinute | ivSecond:
		fields = " minute to second"
	case ivFull:
	default:
		return "", false // PostgreSQL: "invalid INTERVAL typmod"
	}
	if prec := typmod & 0xffff; prec != 0xffff {
		fields += "(" + strconv.Itoa(int(prec)) + ")"
	}
	return "interval" + fields, true
}

// quoteIdent quotes an identifier as PostgreSQL's quote_identifier does:
// unless it is lower-case letters, digits and underscores, not starting with
// a digit, and not a keyword that needs quoting.
func quoteIdent(s string) string {
	safe := s != "" && (s[0] >= 'a' && s[0] <= 'z' || s[0] == '_')
	for i := 0; safe && i < len(s); i++ {
		c := s[i]
		safe = c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
	}
	if safe && !reservedKeywords[s] {
		return s
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := range len(s) {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}

// reservedKeywords are PostgreSQL 15's keywords other than the unreserved
// ones (pg_get_keywords() where catcode <> 'U'): quote_identifier quotes them.
var reservedKeywords = map[string]bool{}

func init() {
	for _, w := range [...]string{
		"all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric",
		"authorization", "between", "bigint", "binary", "bit", "boolean", "both", "case", "cast",
		"char", "character", "check", "coalesce", "collate", "collation", "column",
		"concurrently", "constraint", "create", "cross", "current_catalog", "current_date",
		"current_role", "current_schema", "current_time", "current_timestamp", "current_user",
		"dec", "decimal", "default", "deferrable", "desc", "distinct", "do", "else", "end",
		"except", "exists", "extract", "false", "fetch", "float", "for", "foreign", "freeze",
		"from", "full", "grant", "greatest", "group", "grouping", "having", "ilike", "in",
		"initially", "inner", "inout", "int", "integer", "intersect", "interval", "into", "is",
		"isnull", "join", "lateral", "leading", "least", "left", "like", "limit", "localtime",
		"localtimestamp", "national", "natural", "nchar", "none", "normalize", "not", "notnull",
		"null", "nullif", "numeric", "offset", "on", "only", "or", "order", "out", "outer",
		"overlaps", "overlay", "placing", "position", "precision", "primary", "real",
		"references", "returning", "right", "row", "select", "session_user", "setof", "similar",
		"smallint", "some", "substring", "symmetric", "table", "tablesample", "then", "time",
		"timestamp", "to", "trailing", "treat", "trim", "true", "union", "unique", "user",
		"using", "values", "varchar", "variadic", "verbose", "when", "where", "window", "with",
		"xmlattributes", "xmlconcat", "xmlelement", "xmlexists", "xmlforest", "xmlnamespaces",
		"xmlparse", "xmlpi", "xmlroot", "xmlserialize", "xmltable",
	} {
		reservedKeywords[w] = true
	}
}
