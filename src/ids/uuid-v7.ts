import { randomFillSync } from 'node:crypto';

let lastMs = 0;
let counter = 0;
const random = new Uint8Array(10);

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then a 12-bit counter, then random bits.
 * Ids made by one process sort in creation order, even within one millisecond, so outbox rows written by
 * one unit of work relay in the order the step sent them, and B-tree inserts append. The timestamp is
 * real time on purpose: it orders ids, it is not business time.
 */
export function uuidV7(): string {
  let ms = Date.now();
  if (ms > lastMs) {
    lastMs = ms;
    counter = 0;
  } else {
    counter++;
    if (counter > 0xfff) {
      // 4,096 ids in one millisecond: borrow the next millisecond to stay ordered.
      lastMs++;
      counter = 0;
    }
    ms = lastMs;
  }
  randomFillSync(random);
  const hex = (n: number, width: number) => n.toString(16).padStart(width, '0');
  const time = hex(ms, 12);
  const tail = Array.from(random.subarray(2), (b) => hex(b, 2)).join('');
  const variant = hex(0x80 | (random[0]! & 0x3f), 2) + hex(random[1]!, 2);
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${hex(counter, 3)}-${variant}-${tail.slice(0, 12)}`;
}
