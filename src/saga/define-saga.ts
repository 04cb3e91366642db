import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import type { SagaState } from '../entities/saga-state.js';
import { SagaDefinitionError } from '../errors.js';
import type { AnyMessage, MessageOfType, SagaMessage } from './saga-message.js';
import type { StepContext } from './step-context.js';
import { kindOf, labelOf, nameProblem } from './stored-text.js';

/** String-valued property names of `T`. */
export type PropertyName<T> = Extract<keyof T, string>;

/**
 * What one message does to a saga: mutate `saga` (the loaded state entity), schedule or cancel timers,
 * send messages and complete through `ctx`. Runs before any transaction opens and gets no EntityManager;
 * if it throws, nothing is written.
 */
export type SagaStep<TState, TMessage, TIn extends SagaMessage, TOut extends SagaMessage> = (
  saga: TState,
  message: TMessage,
  ctx: StepContext<TIn, TOut>,
) => void | Promise<void>;

/**
 * How a message finds its saga instance: one function for every message type, or one per type.
 * The value is compared with the state's correlation property.
 */
export type CorrelationSource<TMessage extends SagaMessage> =
  | ((message: TMessage) => unknown)
  | { readonly [K in TMessage['type']]?: (message: MessageOfType<TMessage, K>) => unknown };

/** Input of {@link defineSaga}. */
export interface SagaDefinitionInput<TState extends SagaState, TIn extends SagaMessage, TOut extends SagaMessage> {
  /**
   * The saga type, stored in `saga_timer.saga_type` and `saga_outbox.saga_type`. Unique per runtime and
   * stable across releases (pending timers refer to it). At most 100 characters.
   */
  readonly name: string;
  /** The state entity class: extends `SagaState` and is registered in MikroORM's `entities`. */
  readonly state: new (
    ...args: never[]
  ) => TState;
  /**
   * `property`: the state property that identifies an instance, unique in its table (default `id`).
   * `from`: reads the value from a message. Messages delivered by the saga's own timers need none.
   */
  readonly correlation: {
    readonly property?: PropertyName<TState>;
    readonly from: CorrelationSource<TIn>;
  };
  /** Message types that create the instance when none exists for their correlation value. */
  readonly startedBy: readonly TIn['type'][];
  /** One step per message type the saga handles. */
  readonly steps: { readonly [K in TIn['type']]?: SagaStep<TState, MessageOfType<TIn, K>, TIn, TOut> };
  /**
   * The state property holding the saga's current step (a string). When set, timers are step-scoped by
   * default: a unit of work that changes the step cancels the pending timers scheduled in other steps.
   * Default: none (every timer is saga-scoped).
   */
  readonly stepProperty?: PropertyName<TState>;
  /**
   * Which messages still run their step once the saga is completed: `true` for all, a list of types,
   * or `false` (default): messages for a completed saga are ignored.
   */
  readonly handleCompleted?: boolean | readonly TIn['type'][];
}

/** A validated saga definition; build it with {@link defineSaga} and register it on a `SagaRuntime`. */
export interface SagaDefinition<
  TState extends SagaState = SagaState,
  TIn extends SagaMessage = SagaMessage,
  TOut extends SagaMessage = AnyMessage,
> {
  readonly name: string;
  readonly state: new (...args: never[]) => TState;
  readonly correlationProperty: PropertyName<TState>;
  /** Reads the correlation value of a message; `undefined` when the definition says nothing for its type. */
  readonly correlate: (message: TIn) => { readonly defined: boolean; readonly value: unknown };
  readonly startedBy: ReadonlySet<string>;
  readonly steps: ReadonlyMap<string, SagaStep<TState, TIn, TIn, TOut>>;
  readonly stepProperty: PropertyName<TState> | undefined;
  readonly handlesCompleted: (messageType: string) => boolean;
}

/**
 * Defines a saga. Give both type parameters: the state entity and the union of messages it handles
 * (optionally a third: the union of messages it sends).
 *
 * ```ts
 * const OrderSaga = defineSaga<OrderSagaState, OrderMessage>({
 *   name: 'order',
 *   state: OrderSagaState,
 *   correlation: { property: 'orderId', from: (m) => m.orderId },
 *   startedBy: ['OrderPlaced'],
 *   steps: { OrderPlaced(saga, m, ctx) { ... }, StockReserved(saga, m, ctx) { ... } },
 * });
 * ```
 * @throws SagaDefinitionError `DEFINITION_INVALID` for an empty or over-long name, a start message
 *   without a step, or a malformed option.
 */
export function defineSaga<TState extends SagaState, TIn extends SagaMessage, TOut extends SagaMessage = AnyMessage>(
  input: SagaDefinitionInput<TState, TIn, TOut>,
): SagaDefinition<TState, TIn, TOut> {
  const fail = (message: string): never => {
    throw new SagaDefinitionError('DEFINITION_INVALID', message, { sagaType: input?.name });
  };
  const nameIssue = nameProblem(input?.name, { maxLength: COLUMN_LIMITS.sagaType, notBlank: true });
  if (nameIssue) fail(`A saga needs a name of 1 to ${COLUMN_LIMITS.sagaType} characters; the name ${nameIssue}.`);
  if (typeof input.state !== 'function') fail(`Saga ${input.name}: 'state' must be the state entity class.`);
  const fromIssue = correlationSourceProblem(input.correlation);
  if (fromIssue) fail(`Saga ${input.name}: ${fromIssue}.`);
  if (input.steps === null || typeof input.steps !== 'object' || Array.isArray(input.steps)) {
    fail(`Saga ${input.name}: 'steps' must be an object with one function per message type it handles.`);
  }
  const steps = new Map<string, SagaStep<TState, TIn, TIn, TOut>>();
  for (const [type, step] of Object.entries(input.steps)) {
    const typeIssue = nameProblem(type, { maxLength: COLUMN_LIMITS.messageType });
    if (typeIssue)
      fail(`Saga ${input.name}: a step's message type ${typeIssue}; message types are 1 to ${COLUMN_LIMITS.messageType} characters.`);
    if (typeof step !== 'function') fail(`Saga ${input.name}: the step for '${type}' is not a function.`);
    steps.set(type, step as SagaStep<TState, TIn, TIn, TOut>);
  }
  if (steps.size === 0) fail(`Saga ${input.name} has no steps: add one per message type it handles.`);
  const startedByIssue = typeListProblem(input.startedBy, 'startedBy');
  if (startedByIssue) fail(`Saga ${input.name}: ${startedByIssue}.`);
  const startedBy = new Set<string>(input.startedBy);
  if (startedBy.size === 0) fail(`Saga ${input.name}: 'startedBy' must name at least one message type.`);
  for (const type of startedBy) {
    if (!steps.has(type)) fail(`Saga ${input.name} is started by '${type}' but has no step for it: add steps.${type}.`);
  }
  const completed = input.handleCompleted ?? false;
  const completedIssue = typeof completed === 'boolean' ? undefined : typeListProblem(completed, 'handleCompleted');
  if (completedIssue) fail(`Saga ${input.name}: ${completedIssue}, or a boolean.`);
  const completedTypes = new Set<string>(typeof completed === 'boolean' ? [] : completed);

  const from = input.correlation.from;
  // Copied now, into a Map: an entry changed later cannot break handle(), and a message type named
  // `toString` or `constructor` never finds Object.prototype's function and correlates on what it returns.
  const readers = typeof from === 'function' ? undefined : new Map(Object.entries(from as unknown as Record<string, (m: TIn) => unknown>));
  const correlate =
    typeof from === 'function'
      ? (message: TIn) => ({ defined: true, value: from(message) })
      : (message: TIn) => {
          const read = readers!.get(message.type);
          return read ? { defined: true, value: read(message) } : { defined: false, value: undefined };
        };

  return Object.freeze({
    name: input.name,
    state: input.state,
    correlationProperty: (input.correlation.property ?? 'id') as PropertyName<TState>,
    correlate,
    startedBy,
    steps,
    stepProperty: input.stepProperty,
    handlesCompleted: (type: string) => completed === true || completedTypes.has(type),
  });
}

/**
 * Why `correlation` is not `{ property?, from }` with `from` a function or an object of functions per message
 * type, or undefined. A `from` of null, an array or a non-function entry would only fail per message, untyped.
 */
function correlationSourceProblem(correlation: unknown): string | undefined {
  const fix = "'correlation.from' must be a function, or an object with one function per message type";
  if (correlation === null || typeof correlation !== 'object') return `'correlation' must be an object { property?, from }`;
  const from: unknown = (correlation as { from?: unknown }).from;
  if (typeof from === 'function') return undefined;
  if (from === null || typeof from !== 'object' || Array.isArray(from)) return `${fix}; it is ${kindOf(from)}`;
  const notFunction = Object.entries(from).find(([, read]) => typeof read !== 'function');
  return notFunction && `${fix}; the entry for ${labelOf(notFunction[0])} is ${kindOf(notFunction[1])}`;
}

/**
 * Why a list option (`startedBy`, `handleCompleted`) is not an array of non-empty strings, or undefined. A
 * string is refused, not read as its characters.
 */
function typeListProblem(value: unknown, option: string): string | undefined {
  if (!Array.isArray(value)) return `'${option}' must be an array of message types; it is ${kindOf(value)}`;
  const index = value.findIndex((type) => typeof type !== 'string' || type === '');
  return index < 0 ? undefined : `'${option}' item #${index} is ${kindOf(value[index])}, not a message type: list step names`;
}

/**
 * Why `value` is not a saga definition (what {@link defineSaga} returns), or undefined. Checks its shape, so a
 * definition built by another copy of the library is accepted.
 */
export function definitionProblem(value: unknown): string | undefined {
  if (value === null || typeof value !== 'object') return `is ${kindOf(value)}`;
  const definition = value as Partial<Record<keyof SagaDefinition, unknown>>;
  if (typeof definition.name !== 'string') return 'has no name';
  const shaped =
    typeof definition.state === 'function' &&
    typeof definition.correlationProperty === 'string' &&
    typeof definition.correlate === 'function' &&
    definition.startedBy instanceof Set &&
    definition.steps instanceof Map &&
    typeof definition.handlesCompleted === 'function' &&
    (definition.stepProperty === undefined || typeof definition.stepProperty === 'string');
  return shaped ? undefined : `(named ${labelOf(definition.name)}) is not what defineSaga() returns`;
}
