package prom

// UnorderedRescans counts scans read again because a series' columns came
// out of time order (tests check which path a query took).
var UnorderedRescans = &unorderedRescans
