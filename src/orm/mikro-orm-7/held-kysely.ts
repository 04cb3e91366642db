/*
 * The transaction context MikroORM 7 is given for a unit's transaction the library holds on PostgreSQL
 * (`pg-held-transaction.ts`): a Kysely over MikroORM's own executor, whose one connection is the transaction's.
 */

/** A statement as kysely hands it to a connection. */
export interface CompiledQuery {
  readonly sql: string;
  readonly parameters: readonly unknown[];
}

/** kysely's connection interface (`DatabaseConnection`). */
export interface KyselyConnection {
  executeQuery(query: CompiledQuery): Promise<{ readonly rows: unknown[]; readonly numAffectedRows?: bigint }>;
  streamQuery(query: CompiledQuery, chunkSize?: number): AsyncIterableIterator<{ readonly rows: unknown[] }>;
  cancelQuery(): Promise<void>;
  killSession(): Promise<void>;
}

/** kysely's query executor, which runs a Kysely's statements on the connections a provider hands out. */
export interface KyselyExecutor {
  withConnectionProvider(provider: { provideConnection<T>(consumer: (connection: KyselyConnection) => Promise<T>): Promise<T> }): object;
}

/** The slice of MikroORM 7's kysely client this module uses. */
export interface KyselyLike {
  getExecutor(): KyselyExecutor;
}

/** A held transaction as its contexts see it: how to send a statement in it, and how to make another context of it. */
interface ContextTransaction {
  send(sql: string): Promise<void>;
  context(): object;
}

type HeldKyselyClass = new (props: object, transaction: ContextTransaction) => object;

/**
 * kysely's Kysely class (MikroORM 7's client is one), extended once with the savepoint methods MikroORM calls. Keyed
 * by the class: a process may load more than one copy of kysely.
 */
const heldKyselyClasses = new WeakMap<object, HeldKyselyClass>();

/**
 * The transaction context MikroORM is given: a Kysely whose executor is MikroORM's own on `connection`, with the
 * savepoint methods of kysely's `ControlledTransaction` that MikroORM's nested transactions call (each savepoint a
 * context of its own, as kysely's). It starts no transaction of its own (kysely's `Transaction` refuses that too).
 */
export function heldKysely(kysely: KyselyLike, connection: KyselyConnection): object {
  const base = kysely.constructor as new (props: object) => object;
  let Held = heldKyselyClasses.get(base);
  if (!Held) {
    Held = heldKyselyClass(base);
    heldKyselyClasses.set(base, Held);
  }
  const Context = Held;
  const executor = kysely.getExecutor().withConnectionProvider({ provideConnection: (consumer) => consumer(connection) });
  const props = { config: {}, driver: REFUSING_DRIVER, executor, dialect: REFUSING_DIALECT };
  const transaction: ContextTransaction = {
    send: async (sql: string) => {
      await connection.executeQuery({ sql, parameters: [] });
    },
    context: () => new Context(props, transaction),
  };
  return transaction.context();
}

function heldKyselyClass(base: new (props: object) => object): HeldKyselyClass {
  const quote = (name: string) => `"${name.replaceAll('"', '""')}"`;
  const sending = (transaction: ContextTransaction, sql: string, answer: () => object) => ({
    execute: async () => {
      await transaction.send(sql);
      return answer();
    },
  });
  return class HeldKysely extends base {
    /** The transaction MikroORM's savepoint calls on this context go to (MikroORM hands back only the context). */
    readonly #transaction: ContextTransaction;

    constructor(props: object, transaction: ContextTransaction) {
      super(props);
      this.#transaction = transaction;
    }

    get isTransaction(): boolean {
      return true;
    }

    get isCommitted(): boolean {
      return false;
    }

    get isRolledBack(): boolean {
      return false;
    }

    savepoint(name: string) {
      return sending(this.#transaction, `savepoint ${quote(name)}`, () => this.#transaction.context());
    }

    releaseSavepoint(name: string) {
      return sending(this.#transaction, `release savepoint ${quote(name)}`, () => this);
    }

    rollbackToSavepoint(name: string) {
      return sending(this.#transaction, `rollback to savepoint ${quote(name)}`, () => this);
    }
  };
}

const refuse = () => {
  throw new Error("A unit of work's transaction cannot begin, commit or roll back another one: use em.transactional() for a savepoint.");
};

/** The driver of a held transaction's context: the transaction is the library's to end, and opens no other. */
const REFUSING_DRIVER = {
  init: async () => undefined,
  acquireConnection: refuse,
  beginTransaction: refuse,
  commitTransaction: refuse,
  rollbackTransaction: refuse,
  releaseConnection: async () => undefined,
  destroy: async () => undefined,
};

/** The dialect of a held transaction's context (kysely reads it for `introspection` only). */
const REFUSING_DIALECT = {
  createIntrospector: () => {
    throw new Error("Introspection is not available in a unit of work's transaction: use em.getKysely() outside it.");
  },
};
