package main

import (
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestRanges(t *testing.T) {
	for want, cores := range map[string][]int{"0-3,16-19": {16, 17, 0, 1, 2, 3, 18, 19}, "5": {5}, "1,3": {3, 1}} {
		if got := ranges(cores); got != want {
			t.Errorf("ranges(%v) = %q, want %q", cores, got, want)
		}
	}
}

func TestNodeDevicesTagAndFewer(t *testing.T) {
	devicesFile = filepath.Join(t.TempDir(), "devices.json")
	json := `{"trn2.48xlarge":[` +
		`{"name":"neuron-device-0","attributes":{"draDriverVersion":{"version":"1.1.0"},"resourceType":{"string":"neuron_device"}}},` +
		`{"name":"neuron-device-1","attributes":{"draDriverVersion":{"version":"1.1.0"},"resourceType":{"string":"neuron_device"}}}]}`
	if err := os.WriteFile(devicesFile, []byte(json), 0o644); err != nil {
		t.Fatal(err)
	}
	devices, err := nodeDevices("trn2.48xlarge", "1.2.0-fewer")
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != 1 || devices[0].Name != "neuron-device-0" {
		t.Fatalf("-fewer: %v", devices)
	}
	if v := devices[0].Attributes["draDriverVersion"].VersionValue; v == nil || *v != "1.2.0-fewer" {
		t.Fatalf("draDriverVersion %v", v)
	}
	if _, err := nodeDevices("inf2.xlarge", "1.1.0"); err == nil {
		t.Fatal("an unknown type must fail")
	}
}

func claimWith(params string) *resourceapi.ResourceClaim {
	claim := &resourceapi.ResourceClaim{}
	claim.Status.Allocation = &resourceapi.AllocationResult{}
	claim.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: driverName, Parameters: runtime.RawExtension{Raw: []byte(params)},
		}},
	}}
	return claim
}

func TestClaimLNC(t *testing.T) {
	if lnc, err := claimLNC(claimWith(`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCore":1}`)); err != nil || lnc != 1 {
		t.Fatalf("lnc %d, %v", lnc, err)
	}
	if _, err := claimLNC(claimWith(`{"apiVersion":"neuron.aws.com/v1","kind":"NeuronConfig","logicalNeuronCores":1}`)); err == nil {
		t.Fatal("a misspelt field must fail, as with the real driver")
	}
	d := &driver{instanceType: "trn2.48xlarge"}
	if d.coresPerDevice(2) != 4 || d.coresPerDevice(1) != 8 {
		t.Fatal("trn2: 8 physical cores per device")
	}
}
