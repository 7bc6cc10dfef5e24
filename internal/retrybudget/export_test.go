package retrybudget

// BudgetScript is the budget's script, for tests that lose its replies.
var BudgetScript = budgetScript
