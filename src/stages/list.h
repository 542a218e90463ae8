/* SPDX-License-Identifier: Apache-2.0 */
/* Every stage of the registry, once: EF_STAGE(folder, name) for the stage
 * `name` defined as ef__stage_<name> in src/stages/<folder>/<name>.c.
 *
 * From this list follow the declarations (stage.h), the registry and its
 * order, which `echoflow stages` and the docs show (registry.c), and the
 * build's list of stage files (CMakeLists.txt reads this file). A new
 * stage is its file plus one line here. No include guard: each user
 * defines EF_STAGE, includes this, and undefines it. */
EF_STAGE(sources, range)
EF_STAGE(sources, idx)
EF_STAGE(flow, map)
EF_STAGE(flow, shuffle)
EF_STAGE(flow, echo)
EF_STAGE(flow, batch)
EF_STAGE(flow, prefetch)
EF_STAGE(flow, repeat)
EF_STAGE(flow, take)
EF_STAGE(flow, throttle)
EF_STAGE(flow, select)
EF_STAGE(flow, drop)
EF_STAGE(flow, trace)
EF_STAGE(image, random_crop)
EF_STAGE(image, flip)
EF_STAGE(image, decode)
EF_STAGE(image, decode_crop)
EF_STAGE(image, resize)
EF_STAGE(image, random_resized_crop)
EF_STAGE(image, normalize)
EF_STAGE(image, to_chw)
EF_STAGE(image, cast)
EF_STAGE(image, crop_mirror_normalize)
EF_STAGE(image, ssd_crop)
EF_STAGE(image, pad_boxes)
EF_STAGE(sources, tar)
EF_STAGE(sources, tfrecord)
EF_STAGE(sources, cifar)
EF_STAGE(sources, npy)
EF_STAGE(sources, files)
EF_STAGE(formats, tfexample)
EF_STAGE(text, tokenize)
EF_STAGE(text, pack_tokens)
EF_STAGE(sources, tokens)
EF_STAGE(sources, text)
EF_STAGE(sources, jsonl)
EF_STAGE(sources, service)
EF_STAGE(sources, coco)
EF_STAGE(image, corner_boxes)
EF_STAGE(formats, json_boxes)
