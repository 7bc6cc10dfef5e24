// Package wire holds what the provider clients (packages anthropic and
// openai) share on the wire: a bounded server-sent-events reader, one HTTP
// call with its timeouts and connection handling ([Run]), the parsing of
// error answers ([ParseErrorBody], [ErrorObject], [APIError]), the
// redaction of secrets from every error text, the accumulation of a
// streamed assistant message ([Acc]), and a narrow JSON scanner
// ([Scanner]) with which the clients decode their hot stream frames
// without reflection, leaving every other frame to json.Unmarshal.
//
// A client builds its request with [NewRequest], sends it through a client
// made by [NewHTTPClient] with [Run], and interprets the events of its
// stream with a [Handler] that feeds an [Acc].
package wire
