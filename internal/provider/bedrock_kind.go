package provider

// KindBedrock is Amazon Bedrock's ConverseStream API (package bedrock).
const KindBedrock = "bedrock"

func init() {
	Kinds = append(Kinds, KindBedrock)
	kindNames[KindBedrock] = "Amazon Bedrock"
	// Converse's inferenceConfig.temperature is from 0 to 1.
	maxTemperature[KindBedrock] = 1
}
