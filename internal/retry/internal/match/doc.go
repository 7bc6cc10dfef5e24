// Package match is the classifier's literal-matching engine: regexps that
// run only when their required literals are in the text, and only at the
// positions where a match can start, over texts scanned once by an
// Aho–Corasick index of every pattern's literals.
//
// Package retry holds the patterns (the policy: which wordings mean what);
// this package only decides, fast and exactly as the plain regexp would,
// whether and where they match. [Compile] makes a [Pattern]; [AnyPhrases]
// and [WordPhrases] a family of them; [Scanned] prepares a text for many
// patterns; [Build] compiles the index once every pattern exists (retry's
// init). retry's differential tests check every fast path against the
// plain regexp, on the classifier's own patterns ([Phrases.Patterns],
// [Pattern.Literals] and the rest of inspect.go serve them).
package match
