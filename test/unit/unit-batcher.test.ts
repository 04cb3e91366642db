// Group commit's grouping: write phases that arrive while group transactions run go together in the next, bounded in
// size and in groups at once; each unit learns its own outcome. No database: the batch writer is a stub.
import { describe, expect, it } from 'vitest';
import { SagaDefinitionError } from '../../src/errors.js';
import { resolveRuntimeOptions } from '../../src/saga/runtime-options.js';
import { lockOrder } from '../../src/saga/unit-of-work/lock-order.js';
import { type ItemOutcome, UnitBatcher } from '../../src/saga/unit-of-work/unit-batcher.js';
import { deferred } from '../support/suite.js';

const drain = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A batch writer that records its batches and waits on a gate per batch (in order) before answering. */
function gatedWriter(answer: (item: string) => ItemOutcome<string> = (item) => ({ ok: true, value: `${item}!` })) {
  const batches: string[][] = [];
  const gates: ReturnType<typeof deferred<void>>[] = [];
  const write = async (items: readonly string[]) => {
    batches.push([...items]);
    const gate = deferred();
    gates.push(gate);
    await gate.promise;
    return items.map(answer);
  };
  return { batches, gates, write };
}

describe('UnitBatcher', () => {
  it('writes an item alone at once when no batch runs; items arriving meanwhile go together in the next batch', async () => {
    const writer = gatedWriter();
    const batcher = new UnitBatcher(writer.write, { maxItems: 100, maxBatches: 1 });
    const first = batcher.submit('a');
    await drain();
    expect(writer.batches).toEqual([['a']]);
    const later = ['b', 'c', 'd'].map((item) => batcher.submit(item));
    await drain();
    expect(writer.batches).toEqual([['a']]);
    writer.gates[0]!.resolve();
    expect(await first).toBe('a!');
    await drain();
    expect(writer.batches).toEqual([['a'], ['b', 'c', 'd']]);
    writer.gates[1]!.resolve();
    expect(await Promise.all(later)).toEqual(['b!', 'c!', 'd!']);
  });

  it('the items of one tick form one batch; a batch holds at most maxItems', async () => {
    const writer = gatedWriter();
    const batcher = new UnitBatcher(writer.write, { maxItems: 2, maxBatches: 1 });
    const all = ['a', 'b', 'c', 'd', 'e'].map((item) => batcher.submit(item));
    await drain();
    expect(writer.batches).toEqual([['a', 'b']]);
    writer.gates[0]!.resolve();
    await drain();
    expect(writer.batches).toEqual([
      ['a', 'b'],
      ['c', 'd'],
    ]);
    writer.gates[1]!.resolve();
    await drain();
    writer.gates[2]!.resolve();
    expect(await Promise.all(all)).toEqual(['a!', 'b!', 'c!', 'd!', 'e!']);
    expect(writer.batches).toEqual([['a', 'b'], ['c', 'd'], ['e']]);
  });

  it('up to maxBatches batches run at once: a hung batch does not stop the next from starting', async () => {
    const writer = gatedWriter();
    const batcher = new UnitBatcher(writer.write, { maxItems: 100, maxBatches: 2 });
    void batcher.submit('hung');
    await drain();
    const second = batcher.submit('b');
    await drain();
    expect(writer.batches).toEqual([['hung'], ['b']]);
    expect(batcher.inFlight).toBe(2);
    const third = [batcher.submit('c'), batcher.submit('d')];
    await drain();
    writer.gates[1]!.resolve();
    expect(await second).toBe('b!');
    await drain();
    expect(writer.batches).toEqual([['hung'], ['b'], ['c', 'd']]);
    writer.gates[2]!.resolve();
    expect(await Promise.all(third)).toEqual(['c!', 'd!']);
  });

  it('each item learns its own outcome; a batch writer that throws fails every item of that batch only', async () => {
    const batcher = new UnitBatcher(
      async (items: readonly string[]) => {
        if (items.includes('boom')) throw new Error('group transaction lost');
        return items.map(
          (item): ItemOutcome<string> => (item === 'bad' ? { ok: false, error: new Error(`own ${item}`) } : { ok: true, value: item }),
        );
      },
      { maxItems: 100, maxBatches: 1 },
    );
    const outcomes = await Promise.allSettled([batcher.submit('ok'), batcher.submit('bad'), batcher.submit('ok2')]);
    expect(outcomes.map((o) => (o.status === 'fulfilled' ? o.value : (o.reason as Error).message))).toEqual(['ok', 'own bad', 'ok2']);
    const failed = await Promise.allSettled([batcher.submit('x'), batcher.submit('boom')]);
    expect(failed.map((o) => o.status === 'rejected' && (o.reason as Error).message)).toEqual([
      'group transaction lost',
      'group transaction lost',
    ]);
    expect(await batcher.submit('after')).toBe('after');
  });
});

describe('lockOrder', () => {
  it('orders units by their lock keys element by element, new instances (0) before existing rows (1), stable for ties', () => {
    const keys = [
      ['1', 'b_saga', 'id-2'],
      ['1', 'a_saga', 'id-9'],
      ['0', 'b_saga', 'corr-1'],
      ['1', 'b_saga', 'id-1'],
      ['1', 'b_saga', 'id-2'],
    ];
    expect(lockOrder(keys.map((lockKey) => ({ lockKey })))).toEqual([2, 1, 3, 0, 4]);
  });
});

describe('the groupCommit option', () => {
  const em = { fork: () => em } as never;
  it('defaults to groups of up to 32 units, 2 at once, waiting 250 ms for a held row; false turns grouping off', () => {
    expect(resolveRuntimeOptions({ em, sagas: [] }).groupCommit).toEqual({ maxUnits: 32, maxGroups: 2, lockTimeoutMs: 250 });
    // The database's default (SQLite's groupsAtOnce, 1) unless the option says otherwise.
    expect(resolveRuntimeOptions({ em, sagas: [] }, 1).groupCommit).toMatchObject({ maxGroups: 1 });
    expect(resolveRuntimeOptions({ em, sagas: [], groupCommit: { maxGroups: 3 } }, 1).groupCommit).toMatchObject({ maxGroups: 3 });
    expect(resolveRuntimeOptions({ em, sagas: [], groupCommit: false }).groupCommit).toBe(false);
    expect(resolveRuntimeOptions({ em, sagas: [], groupCommit: { maxUnits: 10 } }).groupCommit).toEqual({
      maxUnits: 10,
      maxGroups: 2,
      lockTimeoutMs: 250,
    });
  });

  it('refuses sizes that are not positive integers, and lock timeouts PostgreSQL cannot take, naming the option', () => {
    const refused = [
      { maxUnits: 0 },
      { maxGroups: 1.5 },
      { maxUnits: Number.NaN },
      { lockTimeoutMs: 0 },
      { lockTimeoutMs: 2.5 },
      { lockTimeoutMs: 2 ** 31 },
      { lockTimeoutMs: '250' as never },
      true as never,
    ];
    for (const groupCommit of refused) {
      expect(() => resolveRuntimeOptions({ em, sagas: [], groupCommit })).toThrow(SagaDefinitionError);
      expect(() => resolveRuntimeOptions({ em, sagas: [], groupCommit })).toThrow(/groupCommit/);
    }
  });
});
