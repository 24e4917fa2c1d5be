package identity

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	base := Key{Schema: "public", Name: "order_lines", IDColumn: "id", IDExists: true}
	with := func(f func(*Key)) Key {
		k := base
		f(&k)
		return k
	}
	cases := []struct {
		name  string
		key   Key
		field string // "" with want "": no problem
		want  string
	}{
		{"one-column primary key", with(func(k *Key) { k.Replident, k.Index, k.Primary, k.Columns = 'd', "pk", true, []string{"id"} }), "", ""},
		{"one-column replica identity index", with(func(k *Key) { k.Replident, k.Index, k.Columns = 'i', "ux", []string{"id"} }), "", ""},
		{"full with a one-column primary key", with(func(k *Key) { k.Replident, k.Index, k.Primary, k.Columns = 'f', "pk", true, []string{"id"} }), "", ""},
		{"keyless full", with(func(k *Key) { k.Replident = 'f' }), "", ""},
		{"keyless full, nullable id", with(func(k *Key) { k.Replident, k.IDNullable = 'f', true }), "id_column",
			`column id may be NULL, and a row without an id cannot be told apart from another (ALTER TABLE "public"."order_lines" ALTER COLUMN "id" SET NOT NULL)`},
		{"nothing", with(func(k *Key) { k.Replident, k.Index, k.Primary, k.Columns = 'n', "pk", true, []string{"id"} }), "",
			`no usable replica identity: once published, UPDATE and DELETE on it fail at the source (add a primary key, or ALTER TABLE "public"."order_lines" REPLICA IDENTITY FULL)`},
		{"default without a primary key", with(func(k *Key) { k.Replident = 'd' }), "", "no usable replica identity"},
		{"id column missing", with(func(k *Key) { k.Replident, k.IDExists = 'f', false }), "id_column", "column id does not exist in public.order_lines"},
		{"part of a composite primary key", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns, k.IDColumn = 'd', "order_lines_pkey", true, []string{"tenant_id", "line_no"}, "line_no"
		}), "id_column", "column line_no is part of the key (tenant_id, line_no) (the primary key order_lines_pkey) and not unique on its own: rows that share line_no but differ in the rest of the key would become one row in ClickHouse; a row is identified by one column: "},
		{"part of a composite key under full", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns, k.IDColumn = 'f', "order_lines_pkey", true, []string{"tenant_id", "line_no"}, "tenant_id"
		}), "id_column", "column tenant_id is part of the key (tenant_id, line_no) (the primary key order_lines_pkey)"},
		{"part of a composite replica identity index", with(func(k *Key) {
			k.Replident, k.Index, k.Columns, k.IDColumn = 'i', "ux", []string{"tenant_id", "line_no"}, "line_no"
		}), "id_column", "column line_no is part of the key (tenant_id, line_no) (the replica identity index ux)"},
		{"partitioned: id and the partition key columns", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns, k.PartitionColumns = 'd', "pk", true, []string{"id", "paid_at", "region"}, []string{"id", "paid_at", "region"}
		}), "", ""},
		{"partitioned: id not in the key", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns, k.PartitionColumns = 'd', "pk", true, []string{"uid", "paid_at"}, []string{"paid_at"}
		}), "id_column", "column id is not in the replica identity (uid, paid_at) (the primary key pk, beyond the partition key columns paid_at), so deletes would not say which row went"},
		{"partitioned: part of the key beyond the partition key", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns, k.PartitionColumns, k.IDColumn = 'd', "pk", true, []string{"tenant_id", "line_no", "at"}, []string{"at"}, "line_no"
		}), "id_column", "column line_no is part of the key (tenant_id, line_no, at) (the primary key pk, beyond the partition key columns at) and not unique on its own: rows that share line_no"},
		{"outside the key", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns, k.IDColumn = 'd', "pk", true, []string{"uid"}, "id"
		}), "id_column",
			"column id is not in the replica identity (uid) (the primary key pk), so deletes would not say which row went"},
		{"unique on its own inside a wider replica identity index", with(func(k *Key) {
			k.Replident, k.Index, k.Columns, k.IDUnique = 'i', "ident", []string{"id", "status"}, true
		}), "", ""},
		{"part of a wider replica identity index, not unique", with(func(k *Key) { k.Replident, k.Index, k.Columns = 'i', "ident", []string{"id", "status"} }), "id_column",
			"column id is part of the key (id, status) (the replica identity index ident) and not unique on its own"},
		{"full, outside a composite key, not unique", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns = 'f', "pk", true, []string{"tenant_id", "line_no"}
		}), "id_column", "column id is not the key (tenant_id, line_no) (the primary key pk) and not unique on its own: rows that share id would become one row in ClickHouse"},
		{"full, outside a composite key, unique", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns, k.IDUnique = 'f', "pk", true, []string{"tenant_id", "line_no"}, true
		}), "", ""},
		{"unique but nullable", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns, k.IDUnique, k.IDNullable = 'f', "pk", true, []string{"tenant_id", "line_no"}, true, true
		}), "id_column", "column id may be NULL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.key.Check()
			if c.want == "" {
				if err != nil {
					t.Fatalf("Check: %v, want none", err)
				}
				return
			}
			var p *Problem
			if !errors.As(err, &p) {
				t.Fatalf("Check: %v, want a *Problem", err)
			}
			if p.Field != c.field || !strings.HasPrefix(p.Reason, c.want) {
				t.Fatalf("Check: field %q, %q\nwant field %q, prefix %q", p.Field, p.Reason, c.field, c.want)
			}
		})
	}
}

func TestCheckColumns(t *testing.T) {
	col := func(name, typ string) Column { return Column{Name: name, Exists: true, Type: typ} }
	base := Key{Schema: "public", Name: "order_lines", Replident: 'd', Index: "order_lines_pkey", Primary: true,
		Columns: []string{"tenant_id", "line_no"}, IDColumns: []string{"tenant_id", "line_no"},
		Facts: []Column{col("tenant_id", "bigint"), col("line_no", "integer")}}
	with := func(f func(*Key)) Key {
		k := base
		k.Facts = append([]Column(nil), base.Facts...)
		f(&k)
		return k
	}
	cases := []struct {
		name string
		key  Key
		want string // "" for no problem; else a prefix of the reason
	}{
		{"the whole primary key, in order", base, ""},
		{"text and uuid columns", with(func(k *Key) {
			k.Columns, k.IDColumns = []string{"region", "id"}, []string{"region", "id"}
			k.Facts = []Column{col("region", "character varying(8)"), col("id", "uuid")}
		}), ""},
		{"keyless full: the operator's claim", with(func(k *Key) { k.Replident, k.Index, k.Primary, k.Columns = 'f', "", false, nil }), ""},
		{"out of order", with(func(k *Key) {
			k.IDColumns = []string{"line_no", "tenant_id"}
			k.Facts = []Column{col("line_no", "integer"), col("tenant_id", "bigint")}
		}), `id_columns ["line_no", "tenant_id"] name the key's columns out of order: the primary key order_lines_pkey orders them ["tenant_id", "line_no"], and the key text follows the index (set "id_columns": ["tenant_id", "line_no"])`},
		{"part of a wider key", with(func(k *Key) { k.Columns = []string{"tenant_id", "line_no", "rev"} }),
			`id_columns ["tenant_id", "line_no"] are not the key of public.order_lines: the primary key order_lines_pkey is ["tenant_id", "line_no", "rev"], and a row is identified by all of it, in index order (set "id_columns": ["tenant_id", "line_no", "rev"])`},
		{"a replica identity index", with(func(k *Key) {
			k.Replident, k.Index, k.Primary, k.Columns = 'i', "ux", false, []string{"tenant_id", "line_no", "x"}
		}), `id_columns ["tenant_id", "line_no"] are not the key of public.order_lines: the replica identity index ux is`},
		{"nullable", with(func(k *Key) { k.Facts[1].Nullable = true }),
			`key column line_no may be NULL, and a row whose key has a NULL cannot be told apart from another (ALTER TABLE "public"."order_lines" ALTER COLUMN "line_no" SET NOT NULL)`},
		{"missing", with(func(k *Key) { k.Facts[0].Exists = false }), "column tenant_id does not exist in public.order_lines"},
		{"a timestamp key column", with(func(k *Key) { k.Facts[1].Type = "timestamp with time zone" }),
			"key column line_no has type timestamp with time zone; a key of several columns takes only smallint, integer, bigint, uuid, text, character varying columns"},
		{"numeric key column", with(func(k *Key) { k.Facts[0].Type = "numeric(10,0)" }), "key column tenant_id has type numeric(10,0)"},
		{"nothing", with(func(k *Key) { k.Replident = 'n' }), "no usable replica identity"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.key.Check()
			if c.want == "" {
				if err != nil {
					t.Fatalf("Check: %v, want none", err)
				}
				return
			}
			var p *Problem
			if !errors.As(err, &p) || !strings.HasPrefix(p.Reason, c.want) {
				t.Fatalf("Check: %v\nwant prefix %q", err, c.want)
			}
			if c.name != "nothing" && p.Field != "id_columns" {
				t.Fatalf("field %q, want id_columns", p.Field)
			}
		})
	}
}

// TestCheckSuggestsTheWholeKey: refusing one column of a composite key
// names the config that identifies rows by all of it.
func TestCheckSuggestsTheWholeKey(t *testing.T) {
	k := Key{Schema: "public", Name: "order_lines", Replident: 'd', Index: "pk", Primary: true,
		Columns: []string{"tenant_id", "line_no"}, IDColumn: "line_no", IDExists: true}
	err := k.Check()
	if err == nil || !strings.HasSuffix(err.Error(), `; or identify rows by the whole key: "id_columns": ["tenant_id", "line_no"], "id_layout": "key"`) {
		t.Fatalf("Check: %v", err)
	}
}
