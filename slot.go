package dlock

// clusterSlots is the number of hash slots of a Redis Cluster.
const clusterSlots = 16384

// clusterSlot is the Redis Cluster hash slot of a lock's keys: CRC16
// (XMODEM) of their hash tag, the lock's name, modulo 16384. A MultiLock
// groups its locks by it without asking the cluster.
func clusterSlot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % clusterSlots
}
