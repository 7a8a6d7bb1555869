// bundle-validate checks an OLM bundle directory with operator-framework's own
// validators, the library behind `operator-sdk bundle validate`: the default
// bundle validators plus the optional `suite=operatorframework` ones
// (OperatorHub metadata, standard categories and capabilities, good practices,
// deprecated APIs). It prints every warning and error, one per line, and exits
// 1 when there is any error.
//
//	bundle-validate [-k8s-version 1.34] BUNDLE_DIR
package main

import (
	"flag"
	"fmt"
	"os"

	apimanifests "github.com/operator-framework/api/pkg/manifests"
	apivalidation "github.com/operator-framework/api/pkg/validation"
	interfaces "github.com/operator-framework/api/pkg/validation/interfaces"
)

// operatorFramework is what `--select-optional suite=operatorframework` runs.
var operatorFramework = interfaces.Validators{
	apivalidation.OperatorHubV2Validator,
	apivalidation.StandardCapabilitiesValidator,
	apivalidation.StandardCategoriesValidator,
	apivalidation.AlphaDeprecatedAPIsValidator,
	apivalidation.GoodPracticesValidator,
}

func main() {
	k8sVersion := flag.String("k8s-version", "", "Kubernetes version to check removed APIs against (default: the CSV's minKubeVersion)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: bundle-validate [-k8s-version X.Y] BUNDLE_DIR")
		os.Exit(2)
	}
	bundle, err := apimanifests.GetBundleFromDir(flag.Arg(0))
	if err != nil {
		fmt.Fprintf(os.Stderr, "bundle-validate: cannot load %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}

	objs := []interface{}{bundle}
	if *k8sVersion != "" {
		objs = append(objs, map[string]string{"k8s-version": *k8sVersion})
	}
	results := apivalidation.DefaultBundleValidators.Validate(bundle.ObjectsToValidate()...)
	results = append(results, operatorFramework.Validate(objs...)...)

	errs, warns := 0, 0
	for _, result := range results {
		for _, e := range result.Errors {
			errs++
			fmt.Printf("ERROR %s: %s\n", result.Name, e.Error())
		}
		for _, w := range result.Warnings {
			warns++
			fmt.Printf("WARNING %s: %s\n", result.Name, w.Error())
		}
	}
	fmt.Printf("bundle-validate: %s: %d error(s), %d warning(s)\n", flag.Arg(0), errs, warns)
	if errs > 0 {
		os.Exit(1)
	}
}
