import { createHash } from 'node:crypto';

/** The namespace of {@link nameUuid}: a version 4 uuid of the library's own. */
const NAMESPACE = Buffer.from('6f1c2d7e4a3b4e59a8c1d2e3f4a5b6c7', 'hex');

/**
 * A name-based uuid (RFC 9562 version 5: SHA-1 of the library's namespace and `name`): the same name always gives the
 * same uuid. It stands for a name in a uuid column (an outgoing message's ordering key in `saga_outbox.saga_id`).
 */
export function nameUuid(name: string): string {
  const hash = createHash('sha1').update(NAMESPACE).update(name, 'utf8').digest();
  hash[6] = (hash[6]! & 0x0f) | 0x50;
  hash[8] = (hash[8]! & 0x3f) | 0x80;
  const hex = hash.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}
