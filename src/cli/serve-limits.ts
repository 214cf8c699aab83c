// quire serve's flags for what one request may carry and how long its side work may take (docs/hardening.md), and
// the checks of flags that would otherwise be read wrong (a port, a number of seconds, an empty API key).

import { Command, InvalidArgumentError, Option } from 'commander';
import { DEFAULT_CAPS } from '../api/caps.js';
import { DEFAULT_GRAMMAR_LIMITS } from '../api/grammar-limits.js';
import { DEFAULT_LIMITS, type ServerLimits } from '../api/options.js';
import { METRICS_NAMES } from '../api/metrics.js';

/** An integer flag at least `min`. */
export function intArg(flag: string, min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`${flag} takes an integer ${max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`}, got "${value}".`);
    }
    return n;
  };
}

/** A number of seconds, >= 0 (or > 0 with `positive`). */
export function secondsArg(flag: string, positive = false): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n < 0 || (positive && n === 0)) {
      throw new InvalidArgumentError(`${flag} takes a number of seconds ${positive ? '> 0' : '>= 0'}, got "${value}".`);
    }
    return n;
  };
}

export const portArg = intArg('--port', 0, 65535);

export function apiKeyArg(value: string): string {
  if (value === '') throw new InvalidArgumentError('--api-key must not be empty (leave the flag out to serve without a key).');
  return value;
}

/** The caps and time limits, as flags with their defaults. */
export function addLimitFlags(cmd: Command): Command {
  const cap = (flag: string, help: string, dflt: number) =>
    cmd.addOption(new Option(`${flag} <n>`, help).argParser(intArg(flag, 1)).default(dflt));
  cmd.addOption(new Option('--max-prompt-chars <n>', 'most characters of prompt text one request may carry (prompts, '
    + 'message contents, input); default 32 per token of --max-model-len, at least 65536').argParser(intArg('--max-prompt-chars', 1)));
  cap('--max-messages', 'most chat messages one request may carry', DEFAULT_CAPS.maxMessages);
  cap('--max-tools', 'most tools one request may carry', DEFAULT_CAPS.maxTools);
  cap('--max-stop-strings', 'most stop strings one request may carry', DEFAULT_LIMITS.maxStopStrings);
  cap('--max-stop-str-len', 'most characters of one stop string or one bad word', DEFAULT_CAPS.maxStopStrLen);
  cap('--max-bad-words', 'most bad_words one request may carry', DEFAULT_CAPS.maxBadWords);
  cap('--max-logit-bias', 'most logit_bias entries one request may carry', DEFAULT_CAPS.maxLogitBias);
  cap('--max-allowed-token-ids', 'most allowed_token_ids one request may carry', DEFAULT_CAPS.maxAllowedTokenIds);
  cap('--max-stop-token-ids', 'most stop_token_ids one request may carry', DEFAULT_CAPS.maxStopTokenIds);
  cap('--max-json-schema-depth', 'deepest nesting of objects and lists in a structured output\'s JSON schema',
    DEFAULT_GRAMMAR_LIMITS.maxJsonSchemaDepth);
  cap('--max-grammar-rules', 'most rules of a structured output\'s EBNF grammar', DEFAULT_GRAMMAR_LIMITS.maxGrammarRules);
  cap('--grammar-workers', 'worker threads that compile grammars and render request chat templates', 2);
  cmd.addOption(new Option('--metrics-names <names>', '/metrics names: quire (quire:...), vllm (vLLM\'s vllm:... with '
    + 'model_name, for vLLM dashboards) or both').choices([...METRICS_NAMES]).default('both'));
  cmd.addOption(new Option('--grammar-compile-timeout <s>', 'seconds a structured output may take to compile (a 400 beyond)')
    .argParser(secondsArg('--grammar-compile-timeout', true)).default(DEFAULT_LIMITS.grammarCompileTimeoutMs / 1000));
  cmd.addOption(new Option('--chat-template-render-timeout <s>', 'seconds a request\'s own chat template may take to render '
    + '(with --trust-request-chat-template; a 400 beyond)')
    .argParser(secondsArg('--chat-template-render-timeout', true)).default(DEFAULT_LIMITS.chatTemplateRenderTimeoutMs / 1000));
  return cmd;
}

/** The server limits the flags set. */
export function limitsFromFlags(flags: Record<string, unknown>): Partial<ServerLimits> {
  const n = (k: string) => flags[k] as number;
  return {
    ...(flags.maxPromptChars !== undefined ? { maxPromptChars: n('maxPromptChars') } : {}),
    maxMessages: n('maxMessages'), maxTools: n('maxTools'), maxStopStrings: n('maxStopStrings'),
    maxStopStrLen: n('maxStopStrLen'), maxBadWords: n('maxBadWords'), maxLogitBias: n('maxLogitBias'),
    maxAllowedTokenIds: n('maxAllowedTokenIds'), maxStopTokenIds: n('maxStopTokenIds'),
    maxJsonSchemaDepth: n('maxJsonSchemaDepth'), maxGrammarRules: n('maxGrammarRules'),
    grammarCompileTimeoutMs: Math.round(n('grammarCompileTimeout') * 1000),
    chatTemplateRenderTimeoutMs: Math.round(n('chatTemplateRenderTimeout') * 1000),
  };
}

/**
 * vLLM refuses to start when the KV cache cannot hold one --max-model-len sequence; so do we, naming the flags that
 * change it. null: it can.
 */
export function kvCacheRefusal(kvCacheTokens: number, maxModelLen: number): string | null {
  if (kvCacheTokens >= maxModelLen) return null;
  return `the KV cache holds ${kvCacheTokens} tokens, less than one sequence of --max-model-len ${maxModelLen}: `
    + `raise --kv-cache-memory (or --gpu-memory-utilization), or lower --max-model-len to at most ${kvCacheTokens}`;
}
