/**
 * The saga step's second baseline: the same business step written with plain MikroORM, as a careful user would
 * without this library. Its own entity (the scripted saga's columns, in a table of its own) with a `version: true`
 * property (`@Property({ version: true })` in decorator form), and per message: `orm.em.fork()`, `em.transactional`,
 * `findOne` by key, change the state, and the flush at the end of the transaction writes it with MikroORM's version
 * check; an `OptimisticLockError` retries on fresh state, as ours retries a conflict. Like ours in the saga-step
 * figures it writes the state only: no outbox row, no handled-message id.
 */
import { randomUUID } from 'node:crypto';
import { DateTimeType, EntitySchema, type MikroORM, OptimisticLockError } from '@mikro-orm/core';

/** The plain entity: the scripted saga's columns, `version` managed by MikroORM. */
export class PlainStepState {
  id: string = randomUUID();
  key!: string;
  stage = 'open';
  counter = 0;
  log = '';
  createdAt: Date = new Date();
  updatedAt: Date = new Date();
  completedAt: Date | null = null;
  version!: number;
}

/** Its mapping (an EntitySchema: unchanged on MikroORM 6 and 7); the unique key is what `findOne` looks up. */
export const PlainStepStateSchema = new EntitySchema<PlainStepState>({
  class: PlainStepState,
  tableName: 'plain_step_state',
  properties: {
    id: { type: 'uuid', fieldName: 'id', primary: true },
    key: { type: 'string', length: 100, fieldName: 'key', unique: true },
    stage: { type: 'string', length: 100, fieldName: 'stage' },
    counter: { type: 'integer', fieldName: 'counter' },
    log: { type: 'text', fieldName: 'log' },
    createdAt: { type: DateTimeType, fieldName: 'created_at' },
    updatedAt: { type: DateTimeType, fieldName: 'updated_at' },
    completedAt: { type: DateTimeType, fieldName: 'completed_at', nullable: true },
    version: { type: 'integer', fieldName: 'version', version: true },
  },
});

/** Attempts per message, the first included: the runtime's default. */
const MAX_ATTEMPTS = 10;

/** Creates one plain row per key, as the scripted saga's `Start` creates one saga each. */
export async function seedPlainStates(orm: MikroORM, keys: readonly string[]): Promise<void> {
  const em = orm.em.fork();
  for (const key of keys) em.persist(Object.assign(new PlainStepState(), { key, log: 'started;' }));
  await em.flush();
}

/**
 * The scripted saga's `Do` step with `{ op: 'inc' }`, in plain MikroORM: load by key in a transaction, leave a
 * completed one alone, bump the counter; the flush updates the row where its version is the one read.
 * @throws OptimisticLockError when conflicts outlast the attempts (none happen in the bench: callers never share a key).
 */
export async function plainOrmStep(orm: MikroORM, key: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await orm.em.fork().transactional(async (em) => {
        const state = await em.findOneOrFail(PlainStepState, { key });
        if (state.completedAt) return;
        state.counter += 1;
      });
      return;
    } catch (error) {
      if (!(error instanceof OptimisticLockError) || attempt >= MAX_ATTEMPTS) throw error;
      // A random wait, growing with the attempts, so that two writers of one row do not collide again.
      await new Promise((resolve) => setTimeout(resolve, Math.random() * Math.min(250, 5 * 2 ** attempt)));
    }
  }
}
