// Package deps holds no code. Its test guards the import boundaries
// between Strata's packages: what the coordinator, the line-protocol
// parser, the wire conversions and the schema may link, and what the
// PromQL layer may import (docs/cluster.md, "Packages"). A rule that a
// test holds lasts.
package deps
