package prom_test

import (
	"os"
	"testing"

	"github.com/stratadb/strata/internal/objstore/objstoretest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	objstoretest.StopMinIO()
	os.Exit(code)
}
