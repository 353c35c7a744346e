// Package batchcheck validates a record batch a producer sent before its
// partition's leader appends it: Kafka's LogValidator and the checks of
// UnifiedLog.analyzeAndValidateRecords, for the v2 format only.
//
// The log stores a produced batch as received and serves it to every
// consumer as is, so a batch that does not decode (a gzip flag over raw
// records, records that do not parse, a count that lies) stops every
// consumer that reaches it, each in its own way. Each batch is read to its
// last record, decompressed if need be, before anything of it is appended;
// a refusal carries Kafka's error code for the partition and a reason for
// the metrics. Decompression streams, and stops once the records pass a
// bound, so a small batch that inflates to gigabytes (a zip bomb) costs a
// bounded amount of memory and time.
//
// It checks bytes only: which broker leads, sizes a listener allows and
// idempotent producers' sequences are its callers'. Followers copy their
// leader's bytes and do not call it.
package batchcheck
