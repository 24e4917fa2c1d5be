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
