// Package tenant names Strata's tenants (docs/tenants.md): a request's
// tenant comes from the X-Scope-OrgID header (HTTP, the Mimir and Cortex
// convention) or the x-scope-orgid metadata (gRPC); without it, the
// request is the default tenant's, which is Strata before tenants.
//
// A tenant's tables are apart from every other's because their catalog
// names are: Qualify is the one function that turns a tenant's table name
// into the catalog's. The default tenant's names are unqualified, so the
// tables, catalog keys and objects made before tenants are the default
// tenant's as they are; another tenant's are QualifierPrefix + tenant +
// "/" + name, a name no user table can have (user table names may not
// start with "__"). Split undoes Qualify, for any name.
//
// The package is a leaf: metasrv, the catalog and the data plane use it.
package tenant

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Default is the tenant of a request that names none.
const Default = "default"

// Header is the HTTP header that names a request's tenant, or tenants
// (Federation) for a federated read.
const Header = "X-Scope-OrgID"

// MetadataKey is the gRPC metadata key that names a call's tenant.
const MetadataKey = "x-scope-orgid"

// Label is the label a federated read adds to every series: the tenant
// it is of (Mimir's name).
const Label = "__tenant_id__"

// Federation separates the tenants of a federated read in the header:
// "a|b" (Mimir's form).
const Federation = "|"

// QualifierPrefix leads the catalog name of a table of a tenant other
// than Default. User table names cannot start with "__" (the prefix is
// reserved), so no name of the default tenant's is one of another's.
const QualifierPrefix = "__t/"

// ErrInvalid: a tenant name that is not one, or a header naming tenants
// where one is wanted.
var ErrInvalid = errors.New("invalid tenant")

var name = regexp.MustCompile(`^[a-zA-Z0-9!._*'()-]{1,150}$`)

// Check refuses a tenant name Mimir would refuse (its X-Scope-OrgID
// characters), or one that cannot be an etcd key's last part. It has no
// "/" (the qualified names' separator) and no "|" (Federation).
func Check(tenant string) error {
	if !name.MatchString(tenant) || tenant == "." || tenant == ".." {
		return fmt.Errorf("%w: tenant %q: 1 to 150 of the letters, digits and !._*'()- only, not . or .. as a whole", ErrInvalid, tenant)
	}
	return nil
}

// Parse reads a header's (or metadata's) tenants: Default if it is empty,
// else the tenants it names, "|"-separated, sorted and without repeats.
func Parse(header string) ([]string, error) {
	header = strings.TrimSpace(header)
	if header == "" {
		return []string{Default}, nil
	}
	ts := strings.Split(header, Federation)
	for _, t := range ts {
		if err := Check(t); err != nil {
			return nil, err
		}
	}
	slices.Sort(ts)
	return slices.Compact(ts), nil
}

// One reads a header that must name one tenant (a write, a table's
// administration): Default if it is empty.
func One(header string) (string, error) {
	ts, err := Parse(header)
	if err != nil {
		return "", err
	}
	if len(ts) > 1 {
		return "", fmt.Errorf("%w: %q names %d tenants; only reads may be federated, a write or a table's administration names one", ErrInvalid, header, len(ts))
	}
	return ts[0], nil
}

// Qualify is the catalog name of tenant's table: table itself for the
// default tenant, QualifierPrefix+tenant+"/"+table for another. Every
// table name of a request reaches the catalog through it.
//
// A default tenant's name that starts with QualifierPrefix is qualified
// too (as "default"'s), so that no request of the default tenant can
// name another tenant's table: such a name is no valid table name, and
// stays none once qualified.
func Qualify(tenant, table string) string {
	if (tenant == Default || tenant == "") && !strings.HasPrefix(table, QualifierPrefix) {
		return table
	}
	if tenant == "" {
		tenant = Default
	}
	return QualifierPrefix + tenant + "/" + table
}

// Split is the tenant and the tenant's table name of a catalog name: the
// inverse of Qualify.
func Split(qualified string) (tenant, table string) {
	rest, ok := strings.CutPrefix(qualified, QualifierPrefix)
	if !ok {
		return Default, qualified
	}
	t, table, ok := strings.Cut(rest, "/")
	if !ok {
		return Default, qualified // not made by Qualify: the default tenant's (invalid) name
	}
	return t, table
}

// Unqualify is msg with the catalog names of tenant t's tables in it
// turned into t's own (for the messages a tenant's request is answered).
func Unqualify(t, msg string) string {
	if t == Default || t == "" {
		return msg
	}
	return strings.ReplaceAll(msg, QualifierPrefix+t+"/", "")
}

// Of is the tenant of a catalog name.
func Of(qualified string) string {
	t, _ := Split(qualified)
	return t
}

// Base is the tenant's own name of a catalog name.
func Base(qualified string) string {
	_, n := Split(qualified)
	return n
}
