package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// tracingWanted reports whether the environment asks for spans to be
// exported: an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), the SDK is not disabled
// (OTEL_SDK_DISABLED=true) and the traces exporter is not "none"
// (OTEL_TRACES_EXPORTER). Otherwise the runtime runs with no tracer.
func tracingWanted(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// checkOTLPProtocol refuses an OTLP protocol other than grpc, the only one
// the binary has an exporter for, rather than sending gRPC to an HTTP port.
func checkOTLPProtocol(getenv func(string) string) error {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(name)); p != "" {
			if p != "grpc" {
				return fmt.Errorf("%s=%q: the consumer exports traces over OTLP/gRPC only (protocol grpc, usually port 4317)", name, p)
			}
			return nil // the traces-specific setting wins over the general one
		}
	}
	return nil
}

// newTracerProvider builds the OpenTelemetry SDK's provider with an OTLP/gRPC
// exporter. The exporter and the SDK read the standard variables themselves
// (OTEL_EXPORTER_OTLP_* for the endpoint, headers, TLS, timeout and
// compression; OTEL_TRACES_SAMPLER[_ARG]; OTEL_BSP_*; OTEL_RESOURCE_ATTRIBUTES
// and OTEL_SERVICE_NAME); service.name defaults to the consumer group.
// Connecting is lazy: a collector that is down costs dropped spans, never a
// failed start.
func newTracerProvider(ctx context.Context, getenv func(string) string, group string) (*sdktrace.TracerProvider, error) {
	if err := checkOTLPProtocol(getenv); err != nil {
		return nil, err
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the group's name.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(group)),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("reading OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// shutdownTracing flushes the spans not yet exported, for at most 5s.
func shutdownTracing(tp *sdktrace.TracerProvider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("flushing spans to the OTLP endpoint failed; some are lost", "err", err)
	}
}
