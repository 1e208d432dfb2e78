"""msprobe's risk levels (clarifications.md, issue "capture"): under the default FOCUS the
low-risk APIs are not recorded; CORE records only the core set; ALL records everything."""

from . import _api_lists

LOW_RISK = frozenset("""
squeeze unsqueeze reshape reshape_as view view_as flatten unflatten expand expand_as repeat
repeat_interleave tile transpose permute moveaxis movedim swapaxes swapdims chunk unsafe_chunk
split split_with_sizes unsafe_split unsafe_split_with_sizes tensor_split hsplit vsplit dsplit
unbind stack cat concat concatenate hstack vstack dstack column_stack row_stack align_as
align_to atleast_1d atleast_2d atleast_3d ravel clamp unfold type_as to float double int long
half bfloat16 byte char bool cfloat numpy empty empty_like zeros zeros_like ones ones_like full
full_like arange linspace logspace eye identity diag diagflat diag_embed triu tril triu_indices
tril_indices clone __bool__ stride
""".split())

# In msprobe 26.2.0 a missing comma fuses chain_matmul and linear, so neither is core there.
# Every name of its torch_npu and distributed lists is core too, by name whatever the prefix
# (so Tensor.gather is core because torch.distributed has a gather).
CORE = frozenset(n.rsplit(".", 1)[-1] for n in _api_lists.TORCH_NPU + _api_lists.DISTRIBUTED
                 + _api_lists.NPU_DISTRIBUTED) | frozenset("""
_fused_adamw_ _fused_adam_ matmul __matmul__ bmm addmm addmm_ addbmm addbmm_ baddbmm baddbmm_
mm mv addmv addmv_ addr addr_ conv1d conv2d conv3d conv_transpose1d conv_transpose2d
conv_transpose3d conv_tbc convolution _convolution multi_dot vecdot batch_norm instance_norm
layer_norm group_norm local_response_norm _batch_norm_impl_index batch_norm_elemt
batch_norm_stats batch_norm_update_stats batch_norm_gather_stats
batch_norm_gather_stats_with_counts batch_norm_backward_elemt batch_norm_backward_reduce
embedding embedding_bag multi_head_attention_forward scaled_dot_product_attention
""".split())


def is_recorded_at(api_name, risk_level):
    if risk_level == "ALL":
        return True
    if risk_level == "CORE":
        return api_name in CORE
    return api_name not in LOW_RISK
