// Two application processes staging for the same saga at once, on PostgreSQL: each delivery is delivered once, in the
// order the stagers' transactions committed, not the order they staged in (their ids and clocks differ). A stager's
// flush takes the saga key's advisory lock before its row takes its order key, and holds it until COMMIT: a second
// stager for the same saga waits for the first to commit; a stager for another saga does not.
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { useChildScripts } from '../support/child-scripts.js';
import { rowsOf } from '../support/rows.js';
import { stagedRowsOf } from '../support/staged-rows.js';
import { startStager, untilWaitingForAdvisoryLock } from '../support/stager-child.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

useChildScripts();

describe('staging from two processes for one saga (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const location = () => String(db().config.clientUrl);
  const setup = async (keys: readonly string[]) => {
    // The stagers stamp their rows by the system clock: the dispatcher's fake one stands an hour later.
    const clock = new FakeClock(new Date(Date.now() + 3_600_000));
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    for (const key of keys) await runtime.handle(scriptedSaga, { type: 'Start', key });
    const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
    return { runtime, dispatcher, rows: rowsOf(db().orm) };
  };

  it('the stager that commits first is delivered first, though it staged (and took its id) second', async () => {
    const key = uniqueKey('first-commit');
    const { dispatcher, rows } = await setup([key]);
    const early = startStager('postgresql', location(), ['steps', key, 'staged-first']);
    const late = startStager('postgresql', location(), ['steps', key, 'committed-first']);
    await Promise.all([early.next('ready'), late.next('ready')]);
    // The early stager stages first (its row's id and created_at are the older) and keeps its transaction open.
    early.send('stage');
    await early.next('staged');
    late.send('stage');
    await late.next('staged');
    late.send('flush');
    await late.next('flushed');
    late.send('commit');
    await late.next('committed');
    early.send('flush');
    await early.next('flushed');
    early.send('commit');
    await early.next('committed');
    await Promise.all([early.exited, late.exited]);

    const staged = await stagedRowsOf(db().orm, key);
    expect(staged.map((row) => row.payload.actions)).toEqual([
      [{ op: 'note', text: 'committed-first' }],
      [{ op: 'note', text: 'staged-first' }],
    ]);
    // Commit order is not id or creation order here: the row committed first has the younger id.
    expect(staged[0]!.id > staged[1]!.id).toBe(true);
    expect((await drainDueTimers(dispatcher)).inbox).toMatchObject({ delivered: 2, failed: 0 });
    expect(await rows.saga(key)).toMatchObject({ log: 'started;committed-first;staged-first;', version: 2 });
  });

  it("a second stager for the same saga waits at its flush for the first's COMMIT; one for another saga does not", async () => {
    const [key, other] = [uniqueKey('held'), uniqueKey('other')];
    const { dispatcher, rows } = await setup([key, other]);
    const first = startStager('postgresql', location(), ['steps', key, 'first']);
    const second = startStager('postgresql', location(), ['steps', key, 'second']);
    const elsewhere = startStager('postgresql', location(), ['steps', other, 'elsewhere']);
    const [, secondReady] = await Promise.all([first.next('ready'), second.next('ready'), elsewhere.next('ready')]);
    first.send('stage');
    first.send('flush');
    await first.next('flushed');
    // The first holds the saga key's lock until it commits: the second's INSERT cannot take an order key before.
    second.send('stage');
    second.send('flush');
    await untilWaitingForAdvisoryLock(db().orm, Number(secondReady.backend));
    // Another saga's stager goes through meanwhile.
    elsewhere.send('stage');
    elsewhere.send('flush');
    elsewhere.send('commit');
    await elsewhere.next('committed');
    first.send('commit');
    await first.next('committed');
    await second.next('flushed');
    second.send('commit');
    await second.next('committed');
    await Promise.all([first.exited, second.exited, elsewhere.exited]);

    await drainDueTimers(dispatcher);
    expect(await rows.saga(key)).toMatchObject({ log: 'started;first;second;' });
    expect(await rows.saga(other)).toMatchObject({ log: 'started;elsewhere;' });
  });

  it('four processes staging 40 deliveries each for three sagas at once: each delivered once, in commit order', async () => {
    const prefix = uniqueKey('many');
    const keys = [0, 1, 2].map((i) => `${prefix}-${i}`);
    const { dispatcher, rows } = await setup(keys);
    const stagers = ['p0', 'p1', 'p2', 'p3'].map((label) =>
      startStager('postgresql', location(), ['interleave', prefix, String(keys.length), '40', label]),
    );
    // All connected before any stages: their transactions interleave from the first on.
    await Promise.all(stagers.map((s) => s.next('ready')));
    for (const stager of stagers) stager.send('go');
    const outputs = await Promise.all(stagers.map((s) => s.exited));
    const commits = outputs.flatMap((lines) => lines.flatMap((line) => (line.commits ?? []) as Commit[]));
    expect(commits).toHaveLength(160);

    const drained = await drainDueTimers(dispatcher);
    expect(drained.inbox).toMatchObject({ delivered: 160, failed: 0, duplicates: 0 });
    let checked = 0;
    for (const key of keys) {
      const delivered = (await rows.saga(key))!.log.split(';').filter((note) => note !== '' && note !== 'started');
      const ofSaga = commits.filter((c) => c.key === key);
      // Each delivered once.
      expect([...delivered].sort()).toEqual(ofSaga.map((c) => c.note).sort());
      const position = new Map(delivered.map((note, i) => [note, i]));
      // Wherever one COMMIT returned before another was sent, the first committed first: it is delivered first.
      for (const a of ofSaga) {
        for (const b of ofSaga) {
          if (a.returned < b.sent) {
            expect(position.get(a.note)!, `${a.note} committed before ${b.note}`).toBeLessThan(position.get(b.note)!);
            checked++;
          }
        }
      }
    }
    // The pairs whose order is known span the processes: the check is not vacuous.
    expect(checked).toBeGreaterThan(1_000);
  });
});

interface Commit {
  readonly key: string;
  readonly note: string;
  readonly sent: number;
  readonly returned: number;
}
