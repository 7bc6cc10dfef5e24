package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
)

// The gRPC floor is the least a gRPC front of the same streams can do: a
// grpc-go server whose AgentService.Prompt posts the prompt's text to the
// mock (an Anthropic Messages stream), reads the SSE lines, and sends each
// text delta as an Event with a MessageUpdate, then a PromptEnd. No
// session, no history, no retry, no store, no metrics, no auth: what is
// left is grpc-go's server and client, net/http's client, and one
// json.Unmarshal per data line. Over gRPC, agentd's way in and out is
// measured against it beside the HTTP floor, so that what grpc-go itself
// costs is told from what agentd adds.
type grpcFloor struct {
	agentdv1.UnimplementedAgentServiceServer
	target string
	hc     *http.Client
}

// mockHeaderPrefix: the metadata a gRPC floor call forwards to the mock
// as HTTP headers (the mock's pacing and stamps, as the HTTP floor's
// client sends them through the reverse proxy).
const mockHeaderPrefix = "x-mock-"

func (f *grpcFloor) Prompt(req *agentdv1.PromptRequest, stream grpc.ServerStreamingServer[agentdv1.Event]) error {
	ctx := stream.Context()
	body := `{"model":"bench","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":` + strconv.Quote(req.GetText()) + `}]}`
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, f.target+"/v1/messages", strings.NewReader(body))
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	hr.Header.Set("x-api-key", "mock-key")
	hr.Header.Set("anthropic-version", "2023-06-01")
	md, _ := metadata.FromIncomingContext(ctx)
	for k, vs := range md {
		if strings.HasPrefix(k, mockHeaderPrefix) && len(vs) > 0 {
			hr.Header.Set(k, vs[0])
		}
	}
	resp, err := f.hc.Do(hr)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return status.Errorf(codes.Unavailable, "the mock answered %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 4096)
	var ev struct {
		Type  string `json:"type"`
		Delta struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"delta"`
	}
	for {
		line, err := br.ReadSlice('\n')
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			ev.Type, ev.Delta.Type, ev.Delta.Text = "", "", ""
			if jerr := json.Unmarshal(data, &ev); jerr != nil {
				return status.Error(codes.Internal, jerr.Error())
			}
			switch {
			case ev.Type == "content_block_delta" && ev.Delta.Type == "text_delta":
				if err := stream.Send(&agentdv1.Event{Type: "message_update", Payload: &agentdv1.Event_MessageUpdate{
					MessageUpdate: &agentdv1.MessageUpdate{TextDelta: ev.Delta.Text},
				}}); err != nil {
					return err
				}
			case ev.Type == "message_stop":
				return stream.Send(&agentdv1.Event{Type: "prompt_end", Payload: &agentdv1.Event_PromptEnd{
					PromptEnd: &agentdv1.PromptEnd{Outcome: "completed"},
				}})
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return status.Error(codes.Unavailable, "the mock's stream ended before message_stop")
			}
			return status.Error(codes.Unavailable, err.Error())
		}
	}
}

// GRPCFloorProcMsg starts the line a grpc-floor process prints when ready.
const GRPCFloorProcMsg = "grpc floor listening on "

// RunGRPCFloor is `agentd bench grpc-floor --target URL`: the gRPC floor
// as a process of its own, so that its CPU time can be read from /proc
// like agentd's. It serves until ctx ends; with cpuProfile set, its whole
// run is CPU-profiled into that file.
func RunGRPCFloor(ctx context.Context, target, cpuProfile string, stdout io.Writer) error {
	return profiled(cpuProfile, func() error {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := newGRPCFloor(target)
		go func() { _ = srv.Serve(lis) }()
		fmt.Fprintf(stdout, "%s%s\n", GRPCFloorProcMsg, lis.Addr().String())
		<-ctx.Done()
		srv.Stop()
		return nil
	})
}

// newGRPCFloor is the gRPC floor's server, relaying to the mock at target.
func newGRPCFloor(target string) *grpc.Server {
	// The provider transport agentd's own is configured like: keep-alive
	// connections enough for every stream, no compression.
	f := &grpcFloor{target: strings.TrimRight(target, "/"), hc: &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}}
	// agentd's one server option that pays on this path (its stream
	// workers): the floor gets it too, so that it is the best a bare
	// grpc-go server does here.
	srv := grpc.NewServer(grpc.NumStreamWorkers(uint32(2 * runtime.GOMAXPROCS(0))))
	agentdv1.RegisterAgentServiceServer(srv, f)
	return srv
}

// StartGRPCFloorProc runs `bin bench grpc-floor` in front of target; its
// URL field is the gRPC address (host:port).
func StartGRPCFloorProc(bin, target, cpuProfile string) (*MockProc, error) {
	return startFloorProc(bin, "grpc-floor", GRPCFloorProcMsg, target, cpuProfile)
}

// DialGRPCFloor is a client of the gRPC floor at addr, with the options
// the bench's agentd client has.
func DialGRPCFloor(addr string) (*grpc.ClientConn, agentdv1.AgentServiceClient, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(8<<20))
	if err != nil {
		return nil, nil, err
	}
	return conn, agentdv1.NewAgentServiceClient(conn), nil
}

// GRPCFloorCall is one prompt through the gRPC floor, read to its
// PromptEnd as PromptGRPC reads agentd's; headers go to the mock.
func GRPCFloorCall(ctx context.Context, api agentdv1.AgentServiceClient, text string, headers map[string]string, t *Turn) error {
	kv := make([]string, 0, 2*len(headers))
	for k, v := range headers {
		kv = append(kv, strings.ToLower(k), v)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	if t.Sent == 0 {
		t.Sent = now()
	}
	stream, err := api.Prompt(ctx, &agentdv1.PromptRequest{Text: text})
	if err != nil {
		return err
	}
	return recvGRPC(stream, t, true)
}
