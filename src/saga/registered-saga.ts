import type { EntityMetadata } from '@mikro-orm/core';
import type { SagaState } from '../entities/saga-state.js';
import { SagaDefinitionError } from '../errors.js';
import type { CorrelationCheck } from './correlation-value.js';
import type { SagaDefinition } from './define-saga.js';
import type { StateValuesCheck } from './state-values.js';
import type { StepContextSettings } from './step-context.js';
import { kindOf } from './stored-text.js';

/** Any saga definition, whatever its state and message types. */
// biome-ignore lint/suspicious/noExplicitAny: the runtime is heterogeneous over saga types.
export type AnySagaDefinition = SagaDefinition<any, any, any>;

/** A definition checked against MikroORM's metadata when the runtime was built. */
export interface RegisteredSaga {
  readonly definition: AnySagaDefinition;
  /** Metadata of the definition's state entity. */
  readonly meta: EntityMetadata;
  readonly settings: StepContextSettings;
  /** Checks a message's correlation value against the correlation property's column (CORRELATION_INVALID). */
  readonly checkCorrelation: CorrelationCheck;
  /** Checks the state values a step set against their columns (STATE_VALUE_INVALID). */
  readonly checkStateValues: StateValuesCheck;
}

/** The value of the definition's `stepProperty` on `state`, as a string; null without one. */
export function readStep(state: SagaState, stepProperty: string | undefined): string | null {
  if (stepProperty === undefined) return null;
  const value = (state as unknown as Record<string, unknown>)[stepProperty];
  return value === null || value === undefined ? null : String(value);
}

/**
 * The name of `definition`, the first argument of `handle()` and the staging calls.
 * @throws SagaDefinitionError `DEFINITION_INVALID` when it is not a saga definition.
 */
export function definitionName(definition: unknown): string {
  const name: unknown = definition !== null && typeof definition === 'object' ? (definition as { name?: unknown }).name : undefined;
  if (typeof name !== 'string') {
    throw new SagaDefinitionError(
      'DEFINITION_INVALID',
      `handle() was given ${kindOf(definition)} instead of a saga definition: pass the definition defineSaga() returned, registered in the 'sagas' option.`,
    );
  }
  return name;
}
