import { defineSaga, type SagaState } from '../../src/index.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { drainContinuations } from './flush-hold.js';
import { StepGate } from './step-gate.js';

/** A message of {@link gatedSaga}: each field asks its step for one thing, in the order listed. */
export type GatedMessage = {
  readonly key?: string;
  /** The step waits at the gate (after its saga was read): units reach their write phase together. */
  readonly gated?: boolean;
  /** The step waits at the second gate instead, released apart from the first. */
  readonly late?: boolean;
  /** After the gate, the step waits a turn of the event loop more: its unit reaches the group after the others. */
  readonly later?: boolean;
  readonly inc?: number;
  /** Writes the text into the saga's `log` column. */
  readonly note?: string;
  /** Sets the unique `key` column to this value (another saga's: a unique violation no retry resolves). */
  readonly rekeyTo?: string;
  /** Schedules a timer of this name a minute ahead, whose Tick adds 1. */
  readonly schedule?: string;
  /** Cancels the pending timer of this name. */
  readonly cancel?: string;
} & ({ readonly type: 'Start' } | { readonly type: 'Do' } | { readonly type: 'Tick' });

/** The state a gated saga needs: a correlation `key` and a `counter`. */
export type GatedState = SagaState & { key: string; counter: number };

/**
 * A saga whose steps do what the message says ({@link GatedMessage}) and can be held at a {@link StepGate}, to
 * make concurrent units of work reach their write phase together (one group). Correlated on `key`; started by
 * Start. `state` defaults to the scripted saga's table.
 */
export function gatedSaga<S extends GatedState = ScriptedSaga>(
  gate: StepGate,
  options: { readonly name?: string; readonly state?: new () => S; readonly second?: StepGate } = {},
) {
  const second = options.second ?? new StepGate(1);
  const act = async (saga: S, message: GatedMessage, ctx: { schedule: (...args: never[]) => void; cancel(name: string): void }) => {
    if (message.gated) await gate.enter();
    if (message.late) await second.enter();
    if (message.later) await drainContinuations();
    if (message.inc) saga.counter += message.inc;
    if (message.note !== undefined) (saga as unknown as { log: string }).log = message.note;
    if (message.rekeyTo) saga.key = message.rekeyTo;
    if (message.cancel) ctx.cancel(message.cancel);
    if (message.schedule)
      (ctx.schedule as (name: string, after: number, m: GatedMessage) => void)(message.schedule, 60_000, { type: 'Tick', inc: 1 });
  };
  return defineSaga<S, GatedMessage>({
    name: options.name ?? 'scripted',
    state: (options.state ?? ScriptedSaga) as never,
    correlation: { property: 'key' as Extract<keyof S, string>, from: { Start: (m) => m.key, Do: (m) => m.key } },
    startedBy: ['Start'],
    steps: { Start: act, Do: act, Tick: act },
  });
}

/** What {@link gatedSaga} returns. */
export type GatedSaga<S extends GatedState = ScriptedSaga> = ReturnType<typeof gatedSaga<S>>;
