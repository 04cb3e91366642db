// Token-checked writes of rows that reach the same point together go out as one statement (the relay's
// start marks and published stamps); each row still learns whether its own claim held.
import { describe, expect, it } from 'vitest';
import { CoalescedWrite } from '../../src/dispatcher/coalesced-write.js';
import type { Claim } from '../../src/sql/dispatch-tables.js';
import { deferred } from '../support/suite.js';

const claim = (id: string): Claim => ({ id, token: `token-${id}` });

describe('CoalescedWrite', () => {
  it('sends the rows queued in one tick as one write, and tells each row whether its claim held or its row was busy', async () => {
    const writes: string[][] = [];
    const write = new CoalescedWrite(async (claims) => {
      writes.push(claims.map((c) => c.id));
      const ids = claims.map((c) => c.id);
      return { written: ids.filter((id) => id !== 'lost' && id !== 'busy'), busy: ids.filter((id) => id === 'busy') };
    });
    const results = await Promise.all(['a', 'lost', 'b', 'busy'].map((id) => write.submit(claim(id))));
    expect(writes).toEqual([['a', 'lost', 'b', 'busy']]);
    expect(results).toEqual(['written', 'lost', 'written', 'busy']);
  });

  it('gathers the rows arriving while a write runs into the next write', async () => {
    const writes: string[][] = [];
    const gate = deferred();
    const write = new CoalescedWrite(async (claims) => {
      writes.push(claims.map((c) => c.id));
      if (writes.length === 1) await gate.promise;
      return { written: claims.map((c) => c.id) };
    });
    const first = write.submit(claim('a'));
    await Promise.resolve();
    const later = [write.submit(claim('b')), write.submit(claim('c'))];
    await new Promise<void>((resolve) => setImmediate(resolve));
    expect(writes).toEqual([['a']]);
    gate.resolve();
    expect(await Promise.all([first, ...later])).toEqual(['written', 'written', 'written']);
    expect(writes).toEqual([['a'], ['b', 'c']]);
  });

  it('fails every row a refused write carried, and writes the next rows again', async () => {
    let refuse = true;
    const write = new CoalescedWrite(async (claims) => {
      if (refuse) throw new Error('database is locked');
      return { written: claims.map((c) => c.id) };
    });
    const refused = await Promise.allSettled([write.submit(claim('a')), write.submit(claim('b'))]);
    expect(refused.map((r) => r.status)).toEqual(['rejected', 'rejected']);
    refuse = false;
    expect(await write.submit(claim('a'))).toBe('written');
  });
});
