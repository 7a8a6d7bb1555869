// Command k8s-neuron-dra-driver is a stand-in for AWS's Neuron DRA kubelet plugin (docs/standin-plugin.md): it
// registers driver neuron.aws.com with the kubelet, publishes its node's ResourceSlice with the devices the
// project's simulator publishes for the node's instance type (baked into the image by `neuron-dra-devtools
// simulate devices`), prepares claims by writing CDI specs that map stand-in device nodes and the Neuron runtime's
// environment into containers, and serves the gRPC health service the DaemonSet's liveness probe asks.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

const (
	driverName        = "neuron.aws.com"
	instanceTypeLabel = "node.kubernetes.io/instance-type"
	// The gRPC health service the operator's liveness probe names (src/logic/desired/driver.rs).
	livenessService = "liveness"
	notReadySuffix  = "-notready"
	fewerSuffix     = "-fewer"
)

// Where the image keeps what was decided at build time.
var (
	devicesFile = "/etc/neuron-dra/devices.json"
	tagFile     = "/etc/neuron-dra/tag"
)

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func main() {
	klog.InitFlags(nil)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx); err != nil {
		klog.ErrorS(err, "k8s-neuron-dra-driver failed")
		os.Exit(1)
	}
	klog.Info("stopped")
}

func readTag() string {
	if tag := os.Getenv("NEURON_DRA_IMAGE_TAG"); tag != "" {
		return tag
	}
	b, err := os.ReadFile(tagFile)
	if err != nil {
		return "1.1.0"
	}
	return strings.TrimSpace(string(b))
}

func run(ctx context.Context) error {
	nodeName := os.Getenv("NODE_NAME")
	if nodeName == "" {
		return fmt.Errorf("NODE_NAME is not set")
	}
	tag := readTag()
	registrar := env("KUBELET_REGISTRAR_DIRECTORY_PATH", "/var/lib/kubelet/plugins_registry")
	pluginsDir := env("KUBELET_PLUGINS_DIRECTORY_PATH", "/var/lib/kubelet/plugins")
	cdiRoot := env("CDI_ROOT", "/var/run/cdi")
	healthPort := env("HEALTHCHECK_PORT", "51515")
	klog.InfoS("starting", "driver", driverName, "node", nodeName, "tag", tag)

	// Health first, so the liveness probe finds the port: NOT_SERVING until registered and published.
	healthServer := health.NewServer()
	healthServer.SetServingStatus(livenessService, healthpb.HealthCheckResponse_NOT_SERVING)
	healthServer.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	// HEALTHCHECK_ADDRESS (a test's driver.env, say status.podIP): local nodes share the host's network, so two
	// host-network plugins on one host each bind their node's address rather than every address.
	listener, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("HEALTHCHECK_ADDRESS"), healthPort))
	if err != nil {
		return fmt.Errorf("health port: %w", err)
	}
	grpcServer := grpc.NewServer()
	healthpb.RegisterHealthServer(grpcServer, healthServer)
	go func() { _ = grpcServer.Serve(listener) }()
	defer grpcServer.Stop()

	// A `-notready` tag is a plugin that cannot start: it exits before registering, so the kubelet restarts it
	// with back-off and the pod is never Ready (the DaemonSet renders no readiness probe, so a process that kept
	// running with failing health would count as Ready until its liveness probe killed it).
	if strings.HasSuffix(tag, notReadySuffix) {
		return fmt.Errorf("image tag %s ends in %s: not starting", tag, notReadySuffix)
	}

	config, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("in-cluster config: %w", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", nodeName, err)
	}
	instanceType := node.Labels[instanceTypeLabel]
	devices, err := nodeDevices(instanceType, tag)
	if err != nil {
		return err
	}

	pluginDir := filepath.Join(pluginsDir, driverName)
	if err := os.MkdirAll(pluginDir, 0o750); err != nil {
		return err
	}
	driver := &driver{
		nodeName:     nodeName,
		instanceType: instanceType,
		cdiRoot:      cdiRoot,
		devDir:       filepath.Join(pluginDir, "dev"),
		devices:      devices,
	}
	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(nodeName),
		kubeletplugin.NodeUID(node.UID),
		kubeletplugin.KubeClient(client),
		kubeletplugin.RegistrarDirectoryPath(registrar),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
	)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer helper.Stop()

	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		nodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	klog.InfoS("publishing ResourceSlice", "node", nodeName, "instanceType", instanceType, "devices", len(devices))
	healthServer.SetServingStatus(livenessService, healthpb.HealthCheckResponse_SERVING)
	healthServer.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)

	<-ctx.Done()
	return nil
}

// nodeDevices: the devices baked in for the instance type, with draDriverVersion set to the image tag (as the
// simulated plugin does), and a `-fewer` tag leaving out the last Neuron device.
func nodeDevices(instanceType, tag string) ([]resourceapi.Device, error) {
	b, err := os.ReadFile(devicesFile)
	if err != nil {
		return nil, err
	}
	var byType map[string][]resourceapi.Device
	if err := json.Unmarshal(b, &byType); err != nil {
		return nil, fmt.Errorf("%s: %w", devicesFile, err)
	}
	devices, ok := byType[instanceType]
	if !ok {
		return nil, fmt.Errorf("no devices for instance type %q (label %s)", instanceType, instanceTypeLabel)
	}
	for i := range devices {
		if _, has := devices[i].Attributes["draDriverVersion"]; has {
			version := tag
			devices[i].Attributes["draDriverVersion"] = resourceapi.DeviceAttribute{VersionValue: &version}
		}
	}
	if strings.HasSuffix(tag, fewerSuffix) {
		for i := len(devices) - 1; i >= 0; i-- {
			if t := devices[i].Attributes["resourceType"].StringValue; t != nil && *t == "neuron_device" {
				devices = append(devices[:i], devices[i+1:]...)
				break
			}
		}
	}
	return devices, nil
}
