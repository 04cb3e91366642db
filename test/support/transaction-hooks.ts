import type { EntityManager, EventSubscriber, TransactionEventArgs } from '@mikro-orm/core';

/** Work a test hands a subscriber: it runs once, with the unit's EntityManager, at the subscriber's event. */
type OnceWork = ((em: EntityManager) => Promise<void>) | undefined;

/** Runs `work` with the unit's EntityManager just before its COMMIT, once. */
export class BeforeCommit implements EventSubscriber {
  work: OnceWork;
  async beforeTransactionCommit({ em }: TransactionEventArgs): Promise<void> {
    await takeWork(this)?.(em!);
  }
}

/** Runs `work` with the unit's EntityManager right after its transaction started (nothing sent on it yet), once. */
export class AfterStart implements EventSubscriber {
  work: OnceWork;
  async afterTransactionStart({ em }: TransactionEventArgs): Promise<void> {
    await takeWork(this)?.(em!);
  }
}

function takeWork(subscriber: { work: OnceWork }): OnceWork {
  const work = subscriber.work;
  subscriber.work = undefined;
  return work;
}

/** MikroORM 7's typed query API and `stream()` on an EntityManager (absent on 6). */
export type KyselyEm = EntityManager & {
  getKysely(): {
    selectFrom(table: string): {
      select(columns: string[]): { where(column: string, op: string, value: unknown): { execute(): Promise<unknown[]> } };
    };
    transaction(): { execute(work: () => Promise<unknown>): Promise<unknown> };
  };
  stream(entity: unknown, options: object): AsyncIterable<{ key: string; counter: number }>;
};
