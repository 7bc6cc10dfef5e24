// Package chat is agentd's terminal client, "agentd chat": a live session in
// the terminal that streams answers as they arrive and shows every step of
// the retry engine (the retry loader with its countdown, Esc to cancel a
// retry, fallbacks, credential switches, final failures).
//
// The pieces are separate so that each is testable without a terminal:
// [Renderer] turns events into output and status (pure, its clock injected),
// promptStream follows one prompt to its prompt_end and resumes it by seq
// after a lost connection, [Model] is the bubbletea program, and the plain
// mode prints line output when stdout is not a terminal.
package chat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	agentdv1 "github.com/agentd/agentd/api/gen/agentd/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// DefaultAddr is agentd's default gRPC address.
const DefaultAddr = "127.0.0.1:9090"

// DefaultModel is the model of a new session when none is given.
const DefaultModel = "sim/echo"

// Options configure a chat.
type Options struct {
	// Addr is agentd's gRPC address (default DefaultAddr).
	Addr string
	// Token, when set, is sent as "authorization: Bearer <token>".
	Token string
	// SessionID attaches to an existing session; else a new session is
	// created on Model.
	SessionID string
	// Model of a new session (default DefaultModel).
	Model string
	// Tools are declared on a new session as client-executed tools: the
	// user types their results.
	Tools []string
	// Interactive runs the terminal UI; else prompts are read line by line
	// and the output is plain lines.
	Interactive bool
	// History is how many of an attached session's latest history entries
	// are shown (default 20; negative: none).
	History int
}

// Exit codes.
const (
	ExitOK          = 0
	ExitError       = 1   // agentd could not be reached or refused the session
	ExitInterrupted = 130 // plain mode interrupted by a signal
)

// setupTimeout bounds connecting and creating or attaching the session.
const setupTimeout = 15 * time.Second

// Run runs a chat until the input ends or the user quits, and returns the
// process exit code. ctx ends it early (a signal).
func Run(ctx context.Context, opts Options, stdin io.Reader, stdout, stderr io.Writer) int {
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.Model == "" {
		opts.Model = DefaultModel
	}
	if opts.History == 0 {
		opts.History = 20
	}
	conn, err := Dial(opts.Addr, opts.Token)
	if err != nil {
		fmt.Fprintf(stderr, "agentd chat: %v\n", err)
		return ExitError
	}
	defer conn.Close()
	api := agentdv1.NewAgentServiceClient(conn)

	sess, history, err := Open(ctx, api, opts)
	if err != nil {
		fmt.Fprintf(stderr, "agentd chat: %s\n", describe(err, opts.Addr))
		return ExitError
	}
	if opts.Interactive {
		return runTUI(ctx, api, sess, history, opts.SessionID != "", stdin, stdout, stderr)
	}
	if _, err := io.WriteString(stdout, String(Header(sess, history, opts.SessionID != ""))); err != nil {
		return ExitError
	}
	return RunPlain(ctx, api, sess.GetId(), stdin, stdout, stderr)
}

// Dial connects to agentd over gRPC without TLS (agentd listens on
// loopback), sending the token as a bearer token on every call.
func Dial(addr, token string) (*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	return grpc.NewClient(addr, opts...)
}

// bearer sends "authorization: Bearer <token>".
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: agentd serves plaintext gRPC on
// loopback.
func (bearer) RequireTransportSecurity() bool { return false }

// Open creates the session, or attaches to opts.SessionID and loads its
// latest history entries.
func Open(ctx context.Context, api API, opts Options) (*agentdv1.Session, []*agentdv1.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	if opts.SessionID == "" {
		req := &agentdv1.CreateSessionRequest{Model: opts.Model}
		for _, t := range opts.Tools {
			req.Tools = append(req.Tools, &agentdv1.Tool{
				Name:        t,
				Description: "A tool run by the user of agentd chat, who types its result.",
				InputSchema: &structpb.Struct{Fields: map[string]*structpb.Value{"type": structpb.NewStringValue("object")}},
			})
		}
		s, err := api.CreateSession(ctx, req)
		return s, nil, err
	}
	s, err := api.GetSession(ctx, &agentdv1.GetSessionRequest{SessionId: opts.SessionID})
	if err != nil {
		return nil, nil, err
	}
	if opts.History < 0 {
		return s, nil, nil
	}
	var tail []*agentdv1.Message
	token := ""
	for {
		resp, err := api.ListMessages(ctx, &agentdv1.ListMessagesRequest{SessionId: s.GetId(), PageSize: 1000, PageToken: token})
		if err != nil {
			return nil, nil, err
		}
		tail = append(tail, resp.GetMessages()...)
		if len(tail) > opts.History {
			tail = tail[len(tail)-opts.History:]
		}
		if token = resp.GetNextPageToken(); token == "" {
			return s, tail, nil
		}
	}
}

// Header is what the chat prints first: the session, and when attaching its
// latest history.
func Header(s *agentdv1.Session, history []*agentdv1.Message, attached bool) []Piece {
	head := fmt.Sprintf("Session %s (%s)", s.GetId(), s.GetModel())
	if !attached {
		return []Piece{{Kind: KindInfo, Text: head}}
	}
	out := []Piece{{Kind: KindInfo, Text: fmt.Sprintf("%s, %d history entries, %s", head, s.GetMessageCount(), s.GetStatus())}}
	if len(history) > 0 {
		if int(s.GetMessageCount()) > len(history) {
			out = append(out, Piece{Kind: KindInfo, Text: fmt.Sprintf("… the latest %d:", len(history))})
		}
		names := map[string]string{}
		for _, m := range history {
			for _, c := range m.GetContent() {
				if c.GetType() == "tool_call" {
					names[c.GetToolCallId()] = c.GetToolName()
				}
			}
			out = append(out, renderMessage(m, names)...)
		}
		out = append(out, Piece{Kind: KindInfo, Text: "---"})
	}
	return out
}

// describe words a setup error for the user.
func describe(err error, addr string) string {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return fmt.Sprintf("cannot reach agentd at %s: %s", addr, errText(err))
	case codes.Unauthenticated:
		return "agentd refused the token (use --token or AGENTD_TOKEN): " + errText(err)
	case codes.NotFound:
		return errText(err)
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	return errText(err)
}

// fatal reports whether a prompt's error means that no further prompt can
// work: agentd is unreachable, the token is refused, the session is gone.
func fatal(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Unauthenticated, codes.PermissionDenied, codes.NotFound, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}
