package provider

// KindVertex is the Gemini API on Google Cloud's Vertex AI, with OAuth 2.0
// access tokens (package gemini, Options.Vertex). Its requests, streams,
// parameters and failures are Gemini's.
const KindVertex = "vertex"

func init() {
	Kinds = append(Kinds, KindVertex)
	kindNames[KindVertex] = "Vertex AI"
	maxTemperature[KindVertex] = 2
}
