// Package protogen compiles the project's .proto files without protoc: it
// parses them with github.com/bufbuild/protocompile and runs the Go plugins
// (protoc-gen-go, protoc-gen-go-grpc, pinned as tools in go.mod) on the
// descriptors, exactly as protoc would.
package protogen

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"
)

// Plugins are run with `go tool NAME` from the module root.
var Plugins = []string{"protoc-gen-go", "protoc-gen-go-grpc"}

// Generate compiles every .proto file under root/protoDir and returns the
// generated files by path relative to root/protoDir.
func Generate(ctx context.Context, root, protoDir string) (map[string][]byte, error) {
	base := filepath.Join(root, protoDir)
	var files []string
	err := filepath.WalkDir(base, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".proto") {
			rel, _ := filepath.Rel(base, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{base}}),
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	compiled, err := c.Compile(ctx, files...)
	if err != nil {
		return nil, fmt.Errorf("protogen: compile: %w", err)
	}
	// Every file and its dependencies, dependencies first.
	var all []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		all = append(all, protodesc.ToFileDescriptorProto(fd))
	}
	for _, f := range compiled {
		add(f)
	}
	out := map[string][]byte{}
	for _, plugin := range Plugins {
		req := &pluginpb.CodeGeneratorRequest{FileToGenerate: files, Parameter: proto.String("paths=source_relative"), ProtoFile: all}
		in, err := proto.Marshal(req)
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, "go", "tool", plugin)
		cmd.Dir = root
		cmd.Stdin = bytes.NewReader(in)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("protogen: go tool %s: %v: %s", plugin, err, stderr.String())
		}
		var resp pluginpb.CodeGeneratorResponse
		if err := proto.Unmarshal(stdout.Bytes(), &resp); err != nil {
			return nil, fmt.Errorf("protogen: %s response: %w", plugin, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("protogen: %s: %s", plugin, resp.GetError())
		}
		for _, f := range resp.File {
			out[f.GetName()] = []byte(f.GetContent())
		}
	}
	return out, nil
}
