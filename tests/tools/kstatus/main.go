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
		// Decoded as Unstructured, whose JSON decoding keeps integers int64 as the API machinery does.
		u := &unstructured.Unstructured{}
		if err := decoder.Decode(u); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		result, err := status.Compute(u)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", u.GetKind(), u.GetName(), err)
		}
		fmt.Fprintf(out, "%s/%s %s %s\n", u.GetKind(), u.GetName(), result.Status, result.Message)
	}
}
