package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// The CDI kind of the specs the plugin writes: one spec file per claim, one CDI device per Neuron device.
const (
	cdiVendor = "neuron.aws.com"
	cdiClass  = "device"
	cdiKind   = cdiVendor + "/" + cdiClass
	// There is no Neuron hardware here: the stand-in device nodes are character devices with /dev/null's numbers.
	standInMajor = 1
	standInMinor = 3
)

type driver struct {
	nodeName     string
	instanceType string
	cdiRoot      string
	devDir       string
	devices      []resourceapi.Device
}

// NeuronCores per device as the runtime numbers them: Trainium1 has 2 NeuronCore-v2 per device (LNC 1 only);
// Trainium2 and later have 8 physical NeuronCore-v3, grouped in logical cores of `lnc` (default 2).
func (d *driver) coresPerDevice(lnc int) int {
	if strings.HasPrefix(d.instanceType, "trn1") {
		return 2
	}
	return 8 / lnc
}

func (d *driver) lncCapable() bool { return !strings.HasPrefix(d.instanceType, "trn1") }

// The opaque NeuronConfig the operator's templates carry (docs/neuron-driver.md), read strictly like the driver.
type neuronConfig struct {
	APIVersion        string `json:"apiVersion"`
	Kind              string `json:"kind"`
	LogicalNeuronCore *int   `json:"logicalNeuronCore,omitempty"`
	UltraserverMode   *int   `json:"ultraserverMode,omitempty"`
}

func claimLNC(claim *resourceapi.ResourceClaim) (int, error) {
	lnc := 2
	for _, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != driverName {
			continue
		}
		var cfg neuronConfig
		dec := json.NewDecoder(strings.NewReader(string(c.Opaque.Parameters.Raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			return 0, fmt.Errorf("opaque config: %w", err)
		}
		if cfg.Kind == "NeuronConfig" && cfg.LogicalNeuronCore != nil {
			lnc = *cfg.LogicalNeuronCore
		}
	}
	if lnc != 1 && lnc != 2 {
		return 0, fmt.Errorf("logicalNeuronCore %d: want 1 or 2", lnc)
	}
	return lnc, nil
}

// deviceIndex: neuron-device-<K> -> K; the UltraServer node entry (neuron-node-0) stands for every device.
func (d *driver) deviceIndexes(name string) ([]int, error) {
	if k, ok := strings.CutPrefix(name, "neuron-device-"); ok {
		i, err := strconv.Atoi(k)
		return []int{i}, err
	}
	if strings.HasPrefix(name, "neuron-node-") {
		var all []int
		for _, dev := range d.devices {
			if id := dev.Attributes["deviceId"].IntValue; id != nil {
				all = append(all, int(*id))
			}
		}
		return all, nil
	}
	return nil, fmt.Errorf("unknown device %q", name)
}

type cdiSpec struct {
	CDIVersion     string         `json:"cdiVersion"`
	Kind           string         `json:"kind"`
	Devices        []cdiDevice    `json:"devices"`
	ContainerEdits containerEdits `json:"containerEdits"`
}
type cdiDevice struct {
	Name           string         `json:"name"`
	ContainerEdits containerEdits `json:"containerEdits"`
}
type containerEdits struct {
	Env         []string     `json:"env,omitempty"`
	DeviceNodes []deviceNode `json:"deviceNodes,omitempty"`
}
type deviceNode struct {
	Path        string `json:"path"`
	HostPath    string `json:"hostPath"`
	Type        string `json:"type"`
	Major       int64  `json:"major"`
	Minor       int64  `json:"minor"`
	Permissions string `json:"permissions"`
}

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiRoot, fmt.Sprintf("%s-%s.json", cdiVendor, uid))
}

// standInNode makes <devDir>/neuron<K> once: a character device with harmless numbers.
func (d *driver) standInNode(k int) (string, error) {
	path := filepath.Join(d.devDir, fmt.Sprintf("neuron%d", k))
	if err := os.MkdirAll(d.devDir, 0o755); err != nil {
		return "", err
	}
	err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(standInMajor, standInMinor)))
	if err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("mknod %s: %w", path, err)
	}
	return path, nil
}

// ranges: 0,1,2,3,8,9 -> "0-3,8-9".
func ranges(cores []int) string {
	sort.Ints(cores)
	var parts []string
	for i := 0; i < len(cores); {
		j := i
		for j+1 < len(cores) && cores[j+1] == cores[j]+1 {
			j++
		}
		if i == j {
			parts = append(parts, strconv.Itoa(cores[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cores[i], cores[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	lnc, err := claimLNC(claim)
	if err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	perDevice := d.coresPerDevice(lnc)
	spec := cdiSpec{CDIVersion: "0.6.0", Kind: cdiKind}
	var result []kubeletplugin.Device
	var indexes, cores []int
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != driverName {
			continue
		}
		ks, err := d.deviceIndexes(r.Device)
		if err != nil {
			return kubeletplugin.PrepareResult{Err: err}
		}
		name := fmt.Sprintf("%s-%s", claim.UID, r.Device)
		dev := cdiDevice{Name: name}
		for _, k := range ks {
			host, err := d.standInNode(k)
			if err != nil {
				return kubeletplugin.PrepareResult{Err: err}
			}
			dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, deviceNode{
				Path: fmt.Sprintf("/dev/neuron%d", k), HostPath: host, Type: "c",
				Major: standInMajor, Minor: standInMinor, Permissions: "rw",
			})
			indexes = append(indexes, k)
			for c := 0; c < perDevice; c++ {
				cores = append(cores, k*perDevice+c)
			}
		}
		spec.Devices = append(spec.Devices, dev)
		result = append(result, kubeletplugin.Device{
			Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			CDIDeviceIDs: []string{cdiKind + "=" + name},
		})
	}
	// Claim-wide: what the Neuron runtime reads, for all the claim's devices together.
	spec.ContainerEdits.Env = []string{"NEURON_RT_VISIBLE_CORES=" + ranges(cores)}
	if d.lncCapable() {
		spec.ContainerEdits.Env = append(spec.ContainerEdits.Env, fmt.Sprintf("NEURON_LOGICAL_NC_CONFIG=%d", lnc))
	}
	sort.Ints(indexes)
	var names []string
	for _, k := range indexes {
		names = append(names, strconv.Itoa(k))
	}
	spec.ContainerEdits.Env = append(spec.ContainerEdits.Env, "NEURON_DRA_DEVICES="+strings.Join(names, ","))
	if err := writeAtomic(d.specPath(claim.UID), spec); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	return kubeletplugin.PrepareResult{Devices: result}
}

func writeAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		out[claim.UID] = d.prepare(claim)
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		err := os.Remove(d.specPath(claim.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		out[claim.UID] = err
	}
	return out, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
}
