package group

// PartitionFor is the __consumer_offsets partition that holds group, of
// partitions: Kafka's abs(groupId.hashCode()) % partitions, so that a
// group has the same coordinator partition as on Kafka.
func PartitionFor(group string, partitions int32) int32 {
	if partitions <= 0 {
		return 0
	}
	// Java's String.hashCode: over UTF-16 code units, wrapping int32.
	var h int32
	for _, r := range group {
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + int32(0xD800+(r>>10))
			h = 31*h + int32(0xDC00+(r&0x3FF))
			continue
		}
		h = 31*h + int32(r)
	}
	// Kafka's Utils.abs: the minimum int maps to 0.
	if h == -1<<31 {
		h = 0
	} else if h < 0 {
		h = -h
	}
	return h % partitions
}
