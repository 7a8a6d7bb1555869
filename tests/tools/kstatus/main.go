// kstatus prints kstatus's verdict (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute, what Flux's health checks
// and the waiters built on kstatus read) for each object of a YAML or JSON stream on stdin, one line each:
//
//	<kind>/<name> <status> <message>
//
// tests/gitops.rs feeds it NeuronDRAConfigs whose status the operator's own status code computed.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	decoder := yaml.NewYAMLOrJSONDecoder(in, 4096)
	for {
		var object map[string]interface{}
		if err := decoder.Decode(&object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		if object == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: object}
		result, err := status.Compute(u)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", u.GetKind(), u.GetName(), err)
		}
		fmt.Fprintf(out, "%s/%s %s %s\n", u.GetKind(), u.GetName(), result.Status, result.Message)
	}
}
