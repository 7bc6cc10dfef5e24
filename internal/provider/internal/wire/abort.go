package wire

import "github.com/agentd/agentd/internal/provider"

// Aborted ends a call whose context is done, keeping what was streamed
// (without reasoning state), for clients that do not go through [Run]
// (package bedrock, which calls through the AWS SDK).
func (a *Acc) Aborted() provider.Result { return a.aborted() }
